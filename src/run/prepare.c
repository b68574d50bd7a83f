// prepare.c — a run's inputs, checked before the model is allocated (see run.h).
#include "run/run.h"
#include "io/checkpoint.h"
#include "io/runinfo.h"
#include "io/savedir.h"
#include "model/model.h"
#include "parallel/comm.h"
#include "perf/balance.h"
#include "core/util.h"
#include "core/watchdog.h"
#include <errno.h>
#include <math.h>
#include <string.h>

static int find_flag(int argc, char **argv, const char *name, const char **val) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], name)) { *val = i + 1 < argc ? argv[i + 1] : NULL; return 1; }
        if (!strncmp(argv[i], name, n) && argv[i][n] == '=') { *val = argv[i] + n + 1; return 1; }
    }
    return 0;
}

// pipeline.layers "auto": the split that balances the chunks' model FLOPs, said once (rank 0).
static void auto_layers(Config *c) {
    int nch = c->pp * (c->pp_virtual > 0 ? c->pp_virtual : 1);
    double cost[256], lo = INFINITY, hi = 0;
    perf_balance_layers(&c->model, cfg_seq_len(c), nch, c->pp_layers, cost);
    c->pp_nlayers = nch;
    if (comm_world_rank()) return;
    printf("pipeline.layers auto: [");
    for (int i = 0; i < nch; i++) {
        printf("%s%d", i ? ", " : "", c->pp_layers[i]);
        lo = fmin(lo, cost[i]); hi = fmax(hi, cost[i]);
    }
    printf("] blocks per chunk; chunk costs %.4g to %.4g GFLOP per token (the largest %.1f %% above the smallest)\n",
           lo / 1e9, hi / 1e9, 100 * (hi / lo - 1));
}

int run_config(Config *c, int argc, char **argv, void (*defaults)(Config *), char *ckdir, size_t cklen) {
    defaults(c);
    const char *path;
    if (find_flag(argc, argv, "--config", &path)) {
        if (!path) { ted_error("--config: needs a file"); return -1; }
        if (config_load_json(c, path)) return -1;
    }
    if (config_apply_flags(c, argc, argv, 1)) return -1;
    if (ckdir && runinfo_resolve(c, argc, argv, ckdir, cklen)) return -1;
    if (config_validate(c)) return -1;
    if (ckdir) config_warn_unused(c, comm_world_rank() == 0 ? stdout : NULL);
    if (c->pp_auto) auto_layers(c);
    return 0;
}

// The checkpoint resumed from holds this run's model and sparse layouts.
static int check_resumed(const Config *c, char *ckdir, size_t cklen) {
    if (ckpt_resolve(c->resume, ckdir, cklen)) return -1;
    Config k = *c;
    if (ckpt_read_config(ckdir, &k) || ckpt_check_model(ckdir, &k, &c->model)) return -1;
    if (!sparse_config_same(&k.sparse, k.seed, &c->sparse, c->seed)) {
        ted_error("%s: the checkpoint's sparse_attention layouts differ from this run's (mode, keys or seed)", ckdir);
        return -1;
    }
    return 0;
}

// The data: loaded, its tokens within the vocabulary, at least one window of T+1 tokens.
static int check_data(const Config *c, Dataset *ds, int T) {
    if (data_load(ds, c->data)) return -1;
    if (ds->max_token >= c->model.vocab_size) {
        ted_error("%s: token id %d does not fit vocab_size %d", c->data, ds->max_token, c->model.vocab_size);
        return -1;
    }
    if (ds->train.n < T + 1) {
        ted_error("%s: the training split has %ld tokens, fewer than one window of %d", c->data, ds->train.n, T + 1);
        return -1;
    }
    return 0;
}

// Rank 0's files: the --save folder (locked for the run) and the --log, opened once all is well.
static int open_outputs(Run *R) {
    const Config *c = &R->c;
    if (comm_world_rank() != 0) return 0;
    if (savedir_check_log(c)) return -1;
    if (c->save[0] && savedir_open(c)) return -1;
    if (c->log[0]) {
        R->log = fopen(c->log, c->resume[0] ? "a" : "w");
        if (!R->log) { ted_error("%s: cannot open the log: %s", c->log, strerror(errno)); return -1; }
    }
    return 0;
}

int run_prepare(Run *R, int argc, char **argv) {
    Config *c = &R->c;
    if (run_config(c, argc, argv, config_defaults, R->ckdir, sizeof R->ckdir)) return TED_EXIT_USAGE;
    watchdog_start(c->watchdog, comm_launcher_keepalive_s());   // from here every collective is watched
    char err[256];
    if (topo_check(comm_world_size(), c->tp, c->ep, c->pp, err, sizeof err)) { ted_error("layout: %s", err); return TED_EXIT_USAGE; }
    int T = cfg_seq_len(c), dp = comm_world_size() / (c->tp * c->pp);
    if (c->eval_every && c->micro_batch * dp < 1) { ted_error("layout: no data-parallel rank"); return TED_EXIT_USAGE; }
    if (runinfo_check_batch(c, dp)) return TED_EXIT_USAGE;
    if (model_overlap_check(c, T)) return TED_EXIT_USAGE;
    if (c->resume[0] && check_resumed(c, R->ckdir, sizeof R->ckdir)) return TED_EXIT_USAGE;
    if (check_data(c, &R->ds, T)) return TED_EXIT_USAGE;
    if (c->save[0] && comm_world_rank() == 0 && ckpt_check_root(c->save)) return TED_EXIT_USAGE;
    if (trainer_device(c)) return TED_EXIT_USAGE;   // last but one: the log is only opened once all is well
    return open_outputs(R) ? TED_EXIT_USAGE : 0;
}
