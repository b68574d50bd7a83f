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

// pipeline.layers "auto": the split that balances the chunks' model FLOPs, said once (rank 0).
static void auto_layers(Config *c) {
    int nch = cfg_chunks(c);
    double cost[256], lo = INFINITY, hi = 0;
    perf_balance_layers(&c->model, cfg_seq_len(c), nch, c->pp_layers, cost);
    c->pp_nlayers = nch;
    if (comm_world_rank()) return;
    printf("pipeline.layers auto: [");
    for (int i = 0; i < nch; i++) {
        printf("%s%d", i ? ", " : "", c->pp_layers[i]);
        lo = fmin(lo, cost[i]);
        hi = fmax(hi, cost[i]);
    }
    printf("] blocks per chunk; chunk costs %.4g to %.4g GFLOP per token (the largest %.1f %% above the smallest)\n",
           lo / 1e9, hi / 1e9, 100 * (hi / lo - 1));
}

// --resume without --save keeps saving into the run's folder: the --resume path when it is the
// folder of step_* checkpoints, the folder holding it when it is one step_N checkpoint. A lone
// checkpoint folder of another name has no run folder: nothing is saved, and a line says so.
static void save_where_resumed(Config *c, const char *ckdir) {
    if (c->save[0]) return;
    char dir[sizeof c->save];
    snprintf(dir, sizeof dir, "%s", c->resume);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    long step;
    char tail;
    int rank0 = comm_world_rank() == 0;
    if (strcmp(ckdir, c->resume) != 0) snprintf(c->save, sizeof c->save, "%s", dir);   // the run's folder itself
    else if (sscanf(base, "step_%ld%c", &step, &tail) == 1) {
        if (!slash) snprintf(c->save, sizeof c->save, ".");
        else if (slash == dir) snprintf(c->save, sizeof c->save, "/");
        else {
            *slash = 0;
            snprintf(c->save, sizeof c->save, "%s", dir);
        }
    } else {
        if (rank0)
            printf("resume: %s is a lone checkpoint, not a run's step_N: nothing is saved unless --save DIR\n", dir);
        return;
    }
    if (rank0) printf("resume: saving into %s, the folder resumed from (--save DIR saves elsewhere)\n", c->save);
}

// The checkpoint a run starts from (--resume or --init-from), read once: its folder resolved into
// dir, its config.json; *from stays NULL when there is none. 0, or -1 after one line.
static int read_checkpoint(int argc, char **argv, ConfigCheckpoint *ck, ConfigCheckpoint **from, char *dir, size_t n) {
    const char *resume = config_flag_value(argc, argv, "--resume"),
               *init = config_flag_value(argc, argv, "--init-from");
    ck->dir = NULL;
    if (resume && resume[0] && init && init[0]) {
        ted_error("--init-from and --resume exclude each other (--resume continues a run with its optimizer state, "
                  "--init-from starts a new run from the weights)");
        return -1;
    }
    const char *path = resume && resume[0] ? resume : init && init[0] ? init : NULL;
    if (!path) return 0;
    config_defaults(&ck->cfg);
    if (ckpt_resolve(path, dir, n) || ckpt_read_config(dir, &ck->cfg)) return -1;
    ck->opt = path == resume ? "--resume" : "--init-from";
    ck->dir = dir;
    *from = ck;
    return 0;
}

// What follows from the checkpoint once the configuration is resolved: where a resumed run saves,
// the training keys that changed since its run (rank 0); the resolved folder of --init-from.
static void after_checkpoint(Config *c, const ConfigCheckpoint *ck) {
    if (!ck) return;
    if (c->resume[0] && runinfo_ckpt_step(ck->dir) >= c->steps) return;   // complete: run_prepare says so
    if (c->resume[0]) {
        save_where_resumed(c, ck->dir);
        if (comm_world_rank() == 0) runinfo_warn_changes(c, ck->dir);
    } else snprintf(c->init_from, sizeof c->init_from, "%s", ck->dir);
}

int run_config(Config *c, int argc, char **argv, void (*defaults)(Config *), ConfigCheckpoint *ck) {
    static char dir[1200];
    ConfigCheckpoint *from = NULL;
    if (ck && read_checkpoint(argc, argv, ck, &from, dir, sizeof dir)) return -1;
    if (config_resolve(c, argc, argv, defaults, from)) return -1;
    after_checkpoint(c, from);
    if (ck) config_warn(c, comm_world_rank() == 0 ? stdout : NULL);
    if (c->pp_auto) auto_layers(c);
    return 0;
}

// The checkpoint resumed from holds this run's sparse layouts (its model is the run's: resolved
// from it).
static int check_resumed(const Config *c, const ConfigCheckpoint *ck) {
    if (!c->resume[0] || sparse_config_same(&ck->cfg.sparse, c->seed, &c->sparse, c->seed)) return 0;
    ted_error("%s: the checkpoint's sparse_attention layouts differ from this run's (mode, keys or seed)", ck->dir);
    return -1;
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
        if (!R->log) {
            ted_error("%s: cannot open the log: %s", c->log, strerror(errno));
            return -1;
        }
    }
    return 0;
}

// The rules that follow from the number of processes: the layout's degrees divide the world, the
// DeepSpeed batch check, the all-to-all's chunks against an expert's capacity.
int run_check_layout(const Config *c, int world) {
    char err[256];
    if (topo_check(world, c->tp, c->ep, c->pp, err, sizeof err)) {
        long need = (long)c->tp * c->pp * c->ep;
        if (world == 1)   // one process: the layout wants ranks that only a launcher starts
            ted_error("layout: %s: this is one process; start ted under mpirun with a multiple of pp x tp x ep = %ld "
                      "processes (mpirun -np %ld ted train ...)", err, need, need);
        else ted_error("layout: %s", err);
        return -1;
    }
    int dp = world / (c->tp * c->pp);
    if (runinfo_check_batch(c, dp)) return -1;
    return model_overlap_check(c, cfg_seq_len(c)) ? -1 : 0;
}

// --resume of a run that reached --steps: nothing to train (one line, exit 0); -1 when its
// trainer_state.json is refused (one line).
static int already_complete(const Config *c, const ConfigCheckpoint *ck) {
    if (!c->resume[0]) return 0;
    char path[1300];
    snprintf(path, sizeof path, "%s/trainer_state.json", ck->dir);
    TrainerState st;
    if (read_trainer_state(path, &st)) return -1;
    int step = st.step;
    if (step < c->steps) return 0;
    if (comm_world_rank() == 0)
        printf("ted train: the run in %s is already complete at step %d (--steps %d); raise --steps to train on, "
               "or start a new run without --resume (--save elsewhere, or --overwrite to replace this one)\n",
               c->resume, step, c->steps);
    return 1;
}

// --ranks is the dry run's stand-in for mpirun -np.
static int check_ranks(const Config *c) {
    if (!c->dry_run_ranks) return 0;
    if (!c->dry_run) ted_error("--ranks %d is for --dry-run (a run's processes are the ones mpirun starts)", c->dry_run_ranks);
    else if (comm_world_size() > 1)
        ted_error("--ranks %d: a dry run under mpirun checks its own %d processes (run one process with --ranks)",
                  c->dry_run_ranks, comm_world_size());
    else if (c->dry_run_ranks < 1) ted_error("--ranks (%d) must be >= 1", c->dry_run_ranks);
    else return 0;
    return -1;
}

int run_prepare(Run *R, int argc, char **argv) {
    Config *c = &R->c;
    static ConfigCheckpoint ck;
    if (run_config(c, argc, argv, config_defaults, &ck)) return TED_EXIT_USAGE;
    if (c->resume[0]) snprintf(R->ckdir, sizeof R->ckdir, "%s", ck.dir);
    int complete = already_complete(c, &ck);
    if (complete < 0) return TED_EXIT_USAGE;
    if ((R->done = complete)) return 0;
    watchdog_start(c->watchdog, comm_launcher_keepalive_s());   // from here every collective is watched
    if (check_ranks(c)) return TED_EXIT_USAGE;
    R->world = c->dry_run_ranks ? c->dry_run_ranks : comm_world_size();
    if (run_check_layout(c, R->world)) return TED_EXIT_USAGE;
    int T = cfg_seq_len(c);
    if (check_resumed(c, &ck)) return TED_EXIT_USAGE;
    if (check_data(c, &R->ds, T)) return TED_EXIT_USAGE;
    if (c->dry_run) return savedir_check_log(c) ? TED_EXIT_USAGE : 0;   // writes nothing, selects no device
    if (c->save[0] && comm_world_rank() == 0 && ckpt_check_root(c->save)) return TED_EXIT_USAGE;
    if (trainer_device(c)) return TED_EXIT_USAGE;   // last but one: the log is only opened once all is well
    return open_outputs(R) ? TED_EXIT_USAGE : 0;
}
