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

// The stage's collectives. Pipeline messages are sent without blocking, so in the steady state one
// hides behind the other stage's work on a micro-batch (mb_ms); only what exceeds it is counted here,
// and *msg_ms returns one message's time for the fill and the drain, which perf_predict adds once.
static double comm_of(Prediction *p, const Traffic *t, const Layout *y, int s, const Cluster *cl, double mb_ms,
                      double *msg_ms) {
    double total = 0;
    for (int g = 0; g < GROUP_N; g++) {
        int far, n = members(y, g, s, cl, &far);
        for (int c = 0; c < COLL_N; c++) {
            const Flow *f = &t->f[c][g];
            if (f->calls <= 0) continue;
            double one = perf_call_ms(c, g == GROUP_PP ? 2 : n, f->bytes / f->calls, &cl->intra, &cl->inter,
                                      g == GROUP_PP ? far > 0 : far);
            double ms = f->calls * one;
            if (g == GROUP_PP && c == COLL_SENDRECV) { *msg_ms = fmax(*msg_ms, one); ms = f->calls * fmax(0, one - mb_ms); }
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

// Overlap: the communication time of stage s that runs behind compute (see perfmodel.h). Passes: a
// forward is 1 part of a step's compute, the backward 2, the recompute 1 more.
static double hidden_ms(const Prediction *q, const ModelConfig *m, int T, const Layout *y, int s, double rate) {
    int l0, l1, nmoe = 0;
    traffic_stage_blocks(m->n_layer, y->pp, s, &l0, &l1);
    for (int l = l0; l < l1; l++) nmoe += cfg_is_moe(m, l);
    double parts = 3 + y->ckpt, hidden = 0, blocks = l1 - l0;
    if (y->overlap_degree > 1 && nmoe > 0 && y->ep > 1) {
        double Rs, Rr, mats = m->expert_type == EXPERT_SWIGLU ? 3 : 2;
        traffic_expert_rows(m, y, T, &Rs, &Rr);
        double experts = Rr * 2 * mats * m->n_embd * cfg_expert_inner(m) / y->tp * parts * nmoe * y->accum / rate * 1e3;
        hidden += fmin(q->coll_ms[COLL_ALLTOALL][GROUP_EP], experts) * (1 - 1.0 / y->overlap_degree);
    }
    if (y->overlap_comm && blocks > 1) {
        double lead = (blocks - 1) / blocks, grads = 0, gathers = 0;   // the last (first) block's cannot hide
        const int groups[] = {GROUP_DP, GROUP_EDP};
        for (int i = 0; i < 2; i++) {
            grads += q->coll_ms[y->zero ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE][groups[i]];
            gathers += y->zero ? q->coll_ms[COLL_ALLGATHER][groups[i]] : 0;
        }
        double backward = q->compute_ms * 2 / parts / (y->zero == 2 ? 1 : y->accum), forward = q->compute_ms / parts / y->accum;
        hidden += fmin(grads, backward * lead) + fmin(gathers, forward * lead);
    }
    return hidden;
}

// c run as layout y: its degrees, ZeRO stage, optimizations, batch split and precision; a
// pipeline of another depth than c's, or an interleaving y's micro-batches do not allow, runs 1F1B.
static void config_of(Config *k, const Config *c, const Layout *y) {
    *k = *c;
    k->tp = y->tp; k->ep = y->ep; k->pp = y->pp; k->zero_stage = y->zero;
    k->dtd = y->dtd; k->cac = y->cac; k->activation_checkpointing = y->ckpt;
    k->micro_batch = y->micro_batch; k->grad_accum = y->accum;
    k->overlap_degree = y->overlap_degree; k->overlap_comm = y->overlap_comm;
    if (y->wbytes == 4) k->bf16 = k->fp16 = 0;
    else if (!k->fp16) k->bf16 = 1;
    if (y->pp != c->pp || (k->pp_schedule == PP_INTERLEAVED && y->accum % y->pp)) {
        k->pp_schedule = PP_1F1B; k->pp_virtual = 1; k->pp_nlayers = 0;
    }
}

// Step time from the stages (compute and exposed communication; the slowest sets the pace):
//   path = slowest stage × (1 + (pp − 1)/m) + the fill and drain messages, 2(pp − 1) of them;
// with devices that share compute units (shared_by > 1), a device idle in the bubble lends its share
// to the others, so compute on the path runs shared_by× faster, and the step is the longer of that
// path and the mean device's busy time at the shared rate: its compute and its communication (on a
// CPU test bed, moving bytes burns the same cores: MPI's copies, the kernel's network stack).
static void step_of(Prediction *p, const Layout *y, double worst_path, double mean_busy, double lone,
                    double msg_ms) {
    double m = y->accum, fill = y->pp > 1 ? 2.0 * (y->pp - 1) * msg_ms : 0;
    double path = worst_path * (1 + (y->pp - 1) / m) + fill;
    p->compute_ms /= lone;
    p->bubble_ms = path - worst_path;
    p->step_ms = path;
    if (mean_busy > path) {   // every device busy all step: the bubble is hidden behind the others' work
        p->step_ms = mean_busy;
        p->compute_ms = mean_busy - p->comm_ms;
        p->bubble_ms = 0;
    }
}

// The optimizer's up-cast buffer (16-bit runs): fp32 for one tile, or with tiling off for every
// element of the rank's optimizer shards (12 bytes of master, m and v each; offloaded: none here).
static double opt_temp(const Config *c, const Layout *y, const MemPlan *mp) {
    if (y->wbytes == 4) return 0;   // fp32 gradients are read in place
    double shard = mp->optimizer / 12;
    return 4 * (c->tile_size > 0 && c->tile_size < shard ? (double)c->tile_size : shard);
}

void perf_predict(Prediction *p, const Config *c, const Layout *y, const Cluster *cl) {
    memset(p, 0, sizeof *p);
    const ModelConfig *m = &c->model;
    int T = c->seq_len > 0 ? c->seq_len : m->n_positions;
    double rate = cl->peak * cl->gemm_eff, worst = -1, mean = 0, msg = 0, lone = cl->shared_by > 1 ? cl->shared_by : 1;
    Prediction time, full;
    memset(&full, 0, sizeof full);
    Config k;
    config_of(&k, c, y);
    for (int s = 0; s < y->pp; s++) {
        Traffic t;
        Prediction q;
        memset(&q, 0, sizeof q);
        traffic_of(&t, m, T, y, s);
        q.compute_ms = stage_flops(m, T, y, s) / rate * 1e3;
        q.comm_ms = comm_of(&q, &t, y, s, cl, q.compute_ms / lone / (2.0 * y->accum), &msg);
        q.hidden_ms = hidden_ms(&q, m, T, y, s, rate);
        q.comm_ms -= q.hidden_ms;
        mean += (q.compute_ms + q.comm_ms) / y->pp;
        Topology top;
        MemPlan mp;
        memplan_topology(&top, y->tp, y->ep, y->pp, y->dp, s);
        memplan_of(&mp, &k, &top, c->device == 1);
        q.state_bytes = mp.state;
        q.act_bytes = mp.act;
        q.opt_temp_bytes = opt_temp(c, y, &mp);
        q.mem_bytes = mp.state + fmax(mp.act, q.opt_temp_bytes);
        double path = q.compute_ms / lone + q.comm_ms;
        if (path > worst) { worst = path; time = q; time.slowest = s; }
        if (q.mem_bytes > full.mem_bytes) full = q;
    }
    *p = time;   // the slowest stage's time, the fullest stage's memory
    p->mem_bytes = full.mem_bytes; p->state_bytes = full.state_bytes; p->act_bytes = full.act_bytes;
    p->opt_temp_bytes = full.opt_temp_bytes;
    step_of(p, y, worst, mean, lone, msg);
    p->fits = p->mem_bytes <= cl->mem;
}
