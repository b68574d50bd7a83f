// routing.c — the step's routing for the trainer (see routing.h): the MoE layer's gating.
#include "model/routing.h"

void routing_step_loads(Model *M) { gating_step_loads(&M->moe); }

void routing_step_end(Model *M, Zero *z) {
    gating_step_end(&M->moe, z);
    M->rng_step = -1;
}

double routing_worst_max_mean(const Model *M) { return gating_worst_max_mean(&M->moe); }

void routing_log_json(const Model *M, char *buf, size_t len) { gating_log_json(&M->moe, buf, len); }
