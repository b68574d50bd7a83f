// memplan.c — the memory of one rank (see memplan.h).
#include "model/memplan.h"
#include "model/model.h"
#include "parallel/zero.h"
#include "core/alloc.h"
#include "core/util.h"
#include <stdlib.h>
#include <string.h>

void memplan_topology(Topology *t, int tp, int ep, int pp, int dp, int stage) {
    memset(t, 0, sizeof *t);
    t->tp = tp; t->ep = ep; t->pp = pp; t->dp = dp; t->edp = dp / ep; t->stage = stage;
    t->world = tp * pp * dp;
    t->rank = (stage * dp) * tp;
}

void memplan_of(MemPlan *p, const Config *c, const Topology *t, int gpu) {
    memset(p, 0, sizeof *p);
    int T = cfg_seq_len(c);
    ModelSize z;
    model_size(&z, c, t, c->micro_batch, T);
    ZeroSize s;
    zero_size(&s, &z.reg, t->dp, t->edp, c, gpu);
    p->params = s.params; p->grads = s.grads; p->optimizer = s.optimizer; p->host_optimizer = s.host_optimizer;
    p->state = s.params + s.grads + s.optimizer;
    p->act = z.act; p->act_per_mb = z.per_mb; p->act_shared = z.shared; p->views = z.views;
    p->total = p->state + p->act;
    p->np_nonexp = z.params[0]; p->np_exp = z.params[1];
    model_size_free(&z);
}

void memplan_worst(MemPlan *p, const Config *c, int tp, int ep, int pp, int dp, int gpu) {
    memset(p, 0, sizeof *p);
    for (int s = 0; s < pp; s++) {
        Topology t;
        MemPlan q;
        memplan_topology(&t, tp, ep, pp, dp, s);
        memplan_of(&q, c, &t, gpu);
        if (q.total > p->total) *p = q;
    }
}

static double per_param(int n, int wbytes, int zero, int offload) {
    if (zero == 0) n = 1;
    return wbytes + (zero == 2 ? (double)wbytes / n : wbytes) + (offload ? 0 : 12.0 / n);
}

double memplan_state_formula(double np_nonexp, double np_exp, int dp, int edp, int wbytes, int zero, int offload) {
    return per_param(dp, wbytes, zero, offload) * np_nonexp + per_param(edp, wbytes, zero, offload) * np_exp;
}

int memplan_check(const MemPlan *p, const Config *c, int rank) {
    const char *l = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");   // ranks of this job on this node
    int local = l && atoi(l) > 0 ? atoi(l) : 1;
    double avail = mem_physical_bytes(), need = (p->total + p->host_optimizer) * local;
    if (!(avail > 0 && need > avail)) return 0;
    ted_error("predicted memory: the model has %ld parameters; rank %d needs %.4g bytes of model state (params %.4g, "
              "grads %.4g, optimizer %.4g under ZeRO-%d) and %.4g of activations (micro-batch %d, checkpointing %s), "
              "%.4g bytes for this node's %d ranks, more than its %.4g bytes of memory", model_num_params(&c->model), rank,
              p->state + p->host_optimizer, p->params, p->grads, p->optimizer + p->host_optimizer, c->zero_stage, p->act,
              c->micro_batch, c->activation_checkpointing ? "on" : "off", need, local, avail);
    return -1;
}
