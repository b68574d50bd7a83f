// eval.c — `ted eval`: a checkpoint's mean loss over windows of a split of the data.
#include "cli/commands.h"
#include "cli/opts.h"
#include "core/util.h"
#include "io/data.h"
#include "run/evaluate.h"
#include "run/loaded.h"
#include "run/threads.h"
#include <stdio.h>
#include <string.h>

// The split that `ted eval` scores: the validation split of --data as training makes it (the
// last 10 % of a text file, or the *_val_* shards), its training split, or a whole file.
static int eval_split(const char *data, const char *which, Dataset *ds, Split **s) {
    memset(ds, 0, sizeof *ds);
    if (!strcmp(which, "all")) {
        *s = &ds->train;
        if (data_load_whole(*s, data)) return -1;
        for (long i = 0; i < (*s)->n; i++)
            if ((*s)->tok[i] > ds->max_token) ds->max_token = (*s)->tok[i];
        return 0;
    }
    if (strcmp(which, "val") && strcmp(which, "train")) {
        ted_error("eval: --split must be val, train or all, got \"%s\"", which);
        return -1;
    }
    *s = !strcmp(which, "val") ? &ds->val : &ds->train;
    return data_load(ds, data);
}

static void help(void) {
    printf("usage: ted eval --load CKPT --data FILE|PATTERN [--split val|train|all] [--windows N|all]\n"
           "                [--micro-batch B] [--seq-len T] [--threads N]\n"
           "  Mean loss of a checkpoint over the first N windows (default all) of a split of the data, split\n"
           "  as training splits it (default val: the last 10 %% of a text file, or the *_val_* shards of a\n"
           "  pattern; all: the whole of one file). Window i = tokens [iT, iT+T+1); T defaults to the\n"
           "  checkpoint's seq_len. Prints {\"loss\", \"lm_loss\", \"aux_loss\", \"windows\", \"split\"}; progress\n"
           "  goes to stderr. With the whole val split this is the val_loss the training log reports.\n"
           "  --threads N: OpenMP threads (default 0: all cores, shared out among the ranks of a node).\n");
}

// The options: 0, or -1 after one line.
typedef struct {
    const char *load, *data, *split;
    long windows, micro_batch, seq_len, threads;   // windows 0: all
} EvalOpts;

static int eval_opts(int argc, char **argv, EvalOpts *e) {
    const char *load = NULL, *data = NULL, *win = "all", *mbs = "8", *tls = "0", *which = "val", *thr = "0";
    Opt o[] = {{"--load", &load},   {"--data", &data},   {"--windows", &win}, {"--micro-batch", &mbs},
               {"--seq-len", &tls}, {"--split", &which}, {"--threads", &thr}};
    *e = (EvalOpts){0};
    if (opts_parse(argc, argv, o, 7, "eval")) return -1;
    if (!data) {
        ted_error("eval: --data FILE is required");
        return -1;
    }
    if ((strcmp(win, "all") && opts_long("eval", "--windows", win, 1, 1L << 40, &e->windows)) ||
        opts_long("eval", "--micro-batch", mbs, 1, 4096, &e->micro_batch) ||
        opts_long("eval", "--seq-len", tls, 0, 1 << 20, &e->seq_len) ||
        opts_long("eval", "--threads", thr, 0, 4096, &e->threads))
        return -1;
    e->load = load;
    e->data = data;
    e->split = which;
    return 0;
}

// The windows to score: all the split has (windows 0) or the first o->windows of them; 0 after
// one line when the data does not fit the model or holds too few.
static long eval_windows(const EvalOpts *o, const Dataset *ds, const Split *s, const Config *c, int T) {
    if (ds->max_token >= c->model.vocab_size) {
        ted_error("%s: token id %d does not fit vocab_size %d", o->data, ds->max_token, c->model.vocab_size);
        return 0;
    }
    long have = data_nwindows(s, T);
    if (!have) ted_error("%s: the %s split holds no window of %d+1 tokens", o->data, o->split, T);
    else if (o->windows > have)
        ted_error("%s: --windows %ld but the %s split holds %ld windows of %d+1 tokens", o->data, o->windows, o->split,
                  have, T);
    else return o->windows ? o->windows : have;
    return 0;
}

int cmd_eval(int argc, char **argv) {
    if (opts_help(argc, argv)) {
        help();
        return 0;
    }
    EvalOpts o;
    if (eval_opts(argc, argv, &o)) return TED_EXIT_USAGE;
    threads_set((int)o.threads);
    Dataset ds;
    Split *s;
    if (eval_split(o.data, o.split, &ds, &s)) return TED_EXIT_USAGE;   // the loader printed its line
    Model M;
    Topology topo;
    Config c;
    char dir[1200];
    if (loaded_model(&M, &topo, &c, o.load, (int)o.micro_batch, (int)o.seq_len, dir)) return TED_EXIT_USAGE;
    long nwin = eval_windows(&o, &ds, s, &c, M.T);
    if (!nwin) return TED_EXIT_USAGE;
    loaded_say(dir, &c);
    Ticker tk;
    ticker_start(&tk, "eval", "windows", (double)nwin, stderr);
    Pipeline P;
    pipe_init(&P, &M, &c);
    EvalResult e = evaluate(&P, s, nwin, M.T, &tk);
    pipe_free(&P);
    printf("{\"loss\": %.9g, \"lm_loss\": %.9g, \"aux_loss\": %.9g, \"windows\": %ld, \"split\": \"%s\"}\n", e.loss,
           e.lm, e.aux, e.windows, o.split);
    model_free(&M);
    data_free(&ds);
    return 0;
}
