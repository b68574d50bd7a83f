// generate.c — `ted generate`: text sampled from a checkpoint.
#include "cli/commands.h"
#include "cli/opts.h"
#include "core/alloc.h"
#include "core/util.h"
#include "io/tokenizer.h"
#include "run/loaded.h"
#include "run/sample.h"
#include "run/threads.h"
#include <stdio.h>

static void help(void) {
    printf("usage: ted generate --load CKPT [--prompt TEXT] [--tokens N] [--temperature X] [--top-k K] [--top-p P]\n"
           "                    [--stop TEXT] [--num-samples S] [--seed N] [--encoder DIR] [--threads N]\n"
           "  Samples up to N tokens (default 200) after the prompt; temperature 1.0, top-k 0 (all), top-p 1.0\n"
           "  (all; else the smallest set of tokens holding that probability), seed 1337. --stop ends a sample\n"
           "  once its text contains TEXT. --num-samples S prints S samples (seeds N, N+1, ...), each under a\n"
           "  \"--- sample i/S\" line. Byte models print bytes; GPT-2 vocabulary models decode with\n"
           "  DIR/encoder.json (default data/gpt2). The text streams to stdout; progress goes to stderr.\n"
           "  --threads N: OpenMP threads (default 1: one sequence is too little work to share; two threads\n"
           "  ran slower here alone, and 10x slower beside other jobs).\n");
}

int cmd_generate(int argc, char **argv) {
    if (opts_help(argc, argv)) { help(); return 0; }
    const char *load = NULL, *prompt = "\n", *ntok = "200", *temp = "1.0", *topk = "0", *seed = "1337", *enc = "data/gpt2";
    const char *topp = "1.0", *stop = NULL, *nsamp = "1", *thr = "1";
    Opt o[] = {{"--load", &load}, {"--prompt", &prompt}, {"--tokens", &ntok}, {"--temperature", &temp},
               {"--top-k", &topk}, {"--seed", &seed}, {"--encoder", &enc}, {"--top-p", &topp}, {"--stop", &stop},
               {"--num-samples", &nsamp}, {"--threads", &thr}};
    long n, k, sd, ns, nt;
    double t, tp;
    if (opts_parse(argc, argv, o, 11, "generate")) return TED_EXIT_USAGE;
    if (opts_long("generate", "--tokens", ntok, 0, 1 << 20, &n) || opts_long("generate", "--top-k", topk, 0, 1 << 20, &k) ||
        opts_long("generate", "--seed", seed, 0, (1L << 62), &sd) || opts_float("generate", "--temperature", temp, 0, &t) ||
        opts_float("generate", "--top-p", topp, 0, &tp) || opts_long("generate", "--num-samples", nsamp, 1, 1 << 20, &ns) ||
        opts_long("generate", "--threads", thr, 1, 4096, &nt))
        return TED_EXIT_USAGE;
    threads_set((int)nt);
    if (!(tp > 0 && tp <= 1)) { ted_error("generate: --top-p must be in (0, 1], got \"%s\"", topp); return TED_EXIT_USAGE; }
    if (stop && !stop[0]) { ted_error("generate: --stop needs a non-empty text"); return TED_EXIT_USAGE; }
    Model M; Topology topo; Config c;
    char dir[1200];
    if (loaded_model(&M, &topo, &c, load, 1, 0, dir)) return TED_EXIT_USAGE;
    Tokenizer *tok = NULL;
    if (c.model.vocab_size != 256 && !(tok = tok_load(enc))) return TED_EXIT_USAGE;
    loaded_say(dir, &c);
    int np;
    int *ids = sample_encode_prompt(tok, prompt, &np);
    double t0 = now_ms();
    long made = 0;
    Pipeline P;
    pipe_init(&P, &M, &c);
    for (long i = 0; i < ns; i++) {
        if (ns > 1) printf("--- sample %ld/%ld\n", i + 1, ns);
        fputs(prompt, stdout);
        SampleOpts so = {(int)n, (float)t, (int)k, (float)tp, stop, (uint64_t)sd + (uint64_t)i};
        made += sample_text(&P, tok, ids, np, &so, stdout);
    }
    pipe_free(&P);
    double ms = now_ms() - t0;
    fprintf(stderr, "generated %ld tokens in %.1f s (%.1f tokens/s)\n", made, ms * 1e-3, made / (ms * 1e-3 + 1e-9));
    ted_free(ids);
    if (tok) tok_free(tok);
    model_free(&M);
    return 0;
}
