// perfmodel.c — the performance model (see perfmodel.h).
#include "perf/perfmodel.h"
#include "parallel/topology.h"
#include "model/mfu.h"
#include "model/model.h"
#include "model/memplan.h"
#include <math.h>
#include <string.h>

double perf_call_ms(int coll, int n, double bytes, const Link *near, const Link *far, int n_far) {
    if (n <= 1) return 0;
    const Link *ring = n_far > 0 ? far : near;   // a ring that leaves the node runs at the slower link
    double s;
    switch (coll) {
    case COLL_ALLREDUCE: s = 2 * (n - 1) * ring->lat + 2.0 * (n - 1) / n * bytes / ring->bw; break;
    case COLL_REDUCE_SCATTER: s = (n - 1) * ring->lat + (n - 1.0) / n * bytes / ring->bw; break;
    case COLL_ALLGATHER: s = (n - 1) * ring->lat + (n - 1.0) * bytes / ring->bw; break;
    case COLL_ALLTOALL: {   // one message of bytes/n to each peer, at that peer's level
        double part = bytes / n;
        s = (n - 1 - n_far) * (near->lat + part / near->bw) + n_far * (far->lat + part / far->bw);
        break;
    }
    default: s = (n_far ? far : near)->lat + bytes / (n_far ? far : near)->bw;   // point to point
    }
    return s * 1e3;
}

// Members of rank (stage s, dp 0, tp 0)'s group g (for the pipeline: its neighbouring stages and
// itself), and how many of them sit on another node than it.
static int members(const Layout *y, int g, int s, const Cluster *cl, int *far) {
    Topology t = {.tp = y->tp, .dp = y->dp, .ep = y->ep, .edp = y->dp / y->ep, .pp = y->pp};
    int r0 = layout_rank(y, s, 0, 0), key, mine = topo_group_of(&t, (GroupKind)g, r0, &key), n = 0;
    *far = 0;
    for (int i = 0; i < y->pp * y->dp * y->tp; i++) {
        int st = i / (y->dp * y->tp);
        if (topo_group_of(&t, (GroupKind)g, i, &key) != mine) continue;
        if (g == GROUP_PP && st != s - 1 && st != s + 1 && i != r0) continue;
        n++;
        *far += i / cl->per_node != r0 / cl->per_node;
    }
    return n;
}

static double comm_of(Prediction *p, const Traffic *t, const Layout *y, int s, const Cluster *cl) {
    double total = 0;
    for (int g = 0; g < GROUP_N; g++) {
        int far, n = members(y, g, s, cl, &far);
        for (int c = 0; c < COLL_N; c++) {
            const Flow *f = &t->f[c][g];
            if (f->calls <= 0) continue;
            double ms = f->calls * perf_call_ms(c, g == GROUP_PP ? 2 : n, f->bytes / f->calls, &cl->intra, &cl->inter,
                                                 g == GROUP_PP ? far > 0 : far);
            p->coll_ms[c][g] = ms;
            total += ms;
        }
    }
    return total;
}

// FLOPs a rank of stage s does in one step (forward and backward; recompute adds a forward).
static double stage_flops(const ModelConfig *m, int T, const Layout *y, int s) {
    int l0, l1;
    traffic_stage_blocks(m->n_layer, y->pp, s, &l0, &l1);
    double all = mfu_flops_per_token(m, T, 0), head = 6.0 * m->vocab_size * m->n_embd;
    double per_token = (all - head) * (l1 - l0) / m->n_layer + (s == y->pp - 1 ? head : 0);
    double tokens = (double)y->micro_batch * T * y->accum;
    return per_token * tokens / y->tp * (y->ckpt ? 4.0 / 3 : 1);
}

// c run as layout y: its degrees, ZeRO stage, optimizations, batch split and precision; a
// pipeline of another depth than c's, or an interleaving y's micro-batches do not allow, runs 1F1B.
static void config_of(Config *k, const Config *c, const Layout *y) {
    *k = *c;
    k->tp = y->tp; k->ep = y->ep; k->pp = y->pp; k->zero_stage = y->zero;
    k->dtd = y->dtd; k->cac = y->cac; k->activation_checkpointing = y->ckpt;
    k->micro_batch = y->micro_batch; k->grad_accum = y->accum;
    if (y->wbytes == 4) k->bf16 = k->fp16 = 0;
    else if (!k->fp16) k->bf16 = 1;
    if (y->pp != c->pp || (k->pp_schedule == PP_INTERLEAVED && y->accum % y->pp)) {
        k->pp_schedule = PP_1F1B; k->pp_virtual = 1; k->pp_nlayers = 0;
    }
}

void perf_predict(Prediction *p, const Config *c, const Layout *y, const Cluster *cl) {
    memset(p, 0, sizeof *p);
    const ModelConfig *m = &c->model;
    int T = c->seq_len > 0 ? c->seq_len : m->n_positions;
    double rate = cl->peak * cl->gemm_eff, worst = -1;
    Config k;
    config_of(&k, c, y);
    for (int s = 0; s < y->pp; s++) {
        Traffic t;
        Prediction q;
        memset(&q, 0, sizeof q);
        traffic_of(&t, m, T, y, s);
        q.compute_ms = stage_flops(m, T, y, s) / rate * 1e3;
        q.comm_ms = comm_of(&q, &t, y, s, cl);
        Topology top;
        MemPlan mp;
        memplan_topology(&top, y->tp, y->ep, y->pp, y->dp, s);
        memplan_of(&mp, &k, &top, c->device == 1);
        q.state_bytes = mp.state;
        q.act_bytes = mp.act;
        q.mem_bytes = mp.total;
        if (q.compute_ms + q.comm_ms > worst) { worst = q.compute_ms + q.comm_ms; *p = q; p->slowest = s; }
        if (q.mem_bytes > p->mem_bytes) { p->mem_bytes = q.mem_bytes; p->state_bytes = q.state_bytes; p->act_bytes = q.act_bytes; }
    }
    double m_ = y->accum;
    p->bubble_ms = y->pp > 1 ? worst * (y->pp - 1) / m_ : 0;
    p->step_ms = worst + p->bubble_ms;
    p->fits = p->mem_bytes <= cl->mem;
}
