// loaded.c — a model from a checkpoint (see loaded.h).
#include "run/loaded.h"
#include "core/backend.h"
#include "core/util.h"
#include "io/checkpoint.h"
#include "io/runinfo.h"
#include "model/memplan.h"

// Whether a model of c with micro-batch B of T tokens fits this node (model/memplan.h), without
// an optimizer, whose state is not counted; 0, or -1 after one line with the numbers.
static int fits_node(const Config *c, const Topology *t, int B, int T) {
    Config k = *c;
    k.micro_batch = B;
    k.seq_len = T;
    MemPlan p;
    memplan_of(&p, &k, t, ted_device == DEV_CUDA);
    p.total -= p.optimizer;
    p.state -= p.optimizer;
    p.optimizer = p.host_optimizer = 0;
    return memplan_check(&p, &k, t->rank);
}

int loaded_model(Model *M, Topology *topo, Config *c, const char *load, int B, int T_override, char *dir) {
    if (!load || !load[0]) {
        ted_error("--load: a checkpoint directory is required");
        return -1;
    }
    if (ckpt_resolve(load, dir, 1200)) return -1;
    config_defaults(c);
    if (ckpt_read_config(dir, c)) return -1;
    int T = T_override > 0 ? T_override : cfg_seq_len(c);
    if (T > c->model.n_positions) {
        ted_error("--seq-len %d exceeds the model's n_positions %d", T, c->model.n_positions);
        return -1;
    }
    topo_init(topo, 1, 1, 1);
    if (fits_node(c, topo, B, T)) return -1;
    model_build(M, c, topo, B, T);
    return ckpt_load_weights(dir, M);
}

void loaded_say(const char *dir, const Config *c) {
    fprintf(stderr, "loaded %s (step %ld): %ld parameters\n", dir, runinfo_ckpt_step(dir), model_num_params(&c->model));
}
