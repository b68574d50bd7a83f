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

// The options: what to load, the prompt, the encoder folder, how many samples on how many
// threads, and the sampling of the first sample (the next ones take the next seeds).
typedef struct {
    const char *load, *prompt, *encoder, *top_p;   // top_p: as given (for its error line)
    long samples, threads;
    SampleOpts so;
} GenerateOpts;

// 0, or -1 after one line.
static int generate_opts(int argc, char **argv, GenerateOpts *g) {
    const char *load = NULL, *prompt = "\n", *ntok = "200", *temp = "1.0", *topk = "0", *seed = "1337",
               *enc = "data/gpt2";
    const char *topp = "1.0", *stop = NULL, *nsamp = "1", *thr = "1";
    Opt o[] = {{"--load", &load},  {"--prompt", &prompt},     {"--tokens", &ntok}, {"--temperature", &temp},
               {"--top-k", &topk}, {"--seed", &seed},         {"--encoder", &enc}, {"--top-p", &topp},
               {"--stop", &stop},  {"--num-samples", &nsamp}, {"--threads", &thr}};
    long n, k, sd;
    double t, tp;
    if (opts_parse(argc, argv, o, 11, "generate")) return -1;
    if (opts_long("generate", "--tokens", ntok, 0, 1 << 20, &n) ||
        opts_long("generate", "--top-k", topk, 0, 1 << 20, &k) ||
        opts_long("generate", "--seed", seed, 0, (1L << 62), &sd) ||
        opts_float("generate", "--temperature", temp, 0, &t) || opts_float("generate", "--top-p", topp, 0, &tp) ||
        opts_long("generate", "--num-samples", nsamp, 1, 1 << 20, &g->samples) ||
        opts_long("generate", "--threads", thr, 1, 4096, &g->threads))
        return -1;
    g->load = load;
    g->prompt = prompt;
    g->encoder = enc;
    g->top_p = topp;
    g->so = (SampleOpts){(int)n, (float)t, (int)k, (float)tp, stop, (uint64_t)sd};
    return 0;
}

// The values the options' ranges do not say: 0, or -1 after one line.
static int generate_check(const GenerateOpts *g) {
    if (!(g->so.top_p > 0 && g->so.top_p <= 1)) {
        ted_error("generate: --top-p must be in (0, 1], got \"%s\"", g->top_p);
        return -1;
    }
    if (g->so.stop && !g->so.stop[0]) {
        ted_error("generate: --stop needs a non-empty text");
        return -1;
    }
    return 0;
}

// The samples, streamed to stdout; the tokens generated.
static long generate(Pipeline *P, const Tokenizer *tok, const GenerateOpts *g) {
    int np;
    int *ids = sample_encode_prompt(tok, g->prompt, &np);
    long made = 0;
    for (long i = 0; i < g->samples; i++) {
        if (g->samples > 1) printf("--- sample %ld/%ld\n", i + 1, g->samples);
        fputs(g->prompt, stdout);
        SampleOpts so = g->so;
        so.seed += (uint64_t)i;
        made += sample_text(P, tok, ids, np, &so, stdout);
    }
    ted_free(ids);
    return made;
}

int cmd_generate(int argc, char **argv) {
    if (opts_help(argc, argv)) {
        help();
        return 0;
    }
    GenerateOpts g;
    if (generate_opts(argc, argv, &g)) return TED_EXIT_USAGE;
    threads_set((int)g.threads);
    if (generate_check(&g)) return TED_EXIT_USAGE;
    Model M;
    Topology topo;
    Config c;
    char dir[1200];
    if (loaded_model(&M, &topo, &c, g.load, 1, 0, dir)) return TED_EXIT_USAGE;
    Tokenizer *tok = NULL;
    if (c.model.vocab_size != 256 && !(tok = tok_load(g.encoder))) return TED_EXIT_USAGE;
    loaded_say(dir, &c);
    double t0 = now_ms();
    Pipeline P;
    pipe_init(&P, &M, &c);
    long made = generate(&P, tok, &g);
    pipe_free(&P);
    double ms = now_ms() - t0;
    fprintf(stderr, "generated %ld tokens in %.1f s (%.1f tokens/s)\n", made, ms * 1e-3, made / (ms * 1e-3 + 1e-9));
    if (tok) tok_free(tok);
    model_free(&M);
    return 0;
}
