// perfmodel.c — the performance model (see perfmodel.h).
#include "perf/perfmodel.h"
#include "parallel/topology.h"
#include "model/mfu.h"
#include "model/model.h"
#include "model/memplan.h"
#include "parallel/schedule.h"
#include "core/alloc.h"
#include <math.h>
#include <string.h>

// Every member's share reaches every other once, over the link between them (members on this
// node over the near link, the rest over this device's share of the uplink: what recursive doubling
// and hierarchical rings achieve); latency per algorithm step, at the slower link the group crosses.
double perf_call_ms(int coll, int n, double bytes, const Link *near, const Link *far, int n_far) {
    if (n <= 1) return 0;
    const Link *slow = n_far > 0 ? far : near;
    double in_node = n - 1 - n_far, s;
    switch (coll) {
    case COLL_ALLREDUCE:   // a reduce-scatter and an all-gather of the same bytes
        s = 2 * ((n - 1) * slow->lat + (in_node / near->bw + n_far / far->bw) * bytes / n); break;
    case COLL_REDUCE_SCATTER: s = (n - 1) * slow->lat + (in_node / near->bw + n_far / far->bw) * bytes / n; break;
    case COLL_ALLGATHER: s = (n - 1) * slow->lat + (in_node / near->bw + n_far / far->bw) * bytes; break;
    case COLL_ALLTOALL: {   // one message of bytes/n to each peer, at that peer's level
        double part = bytes / n;
        s = in_node * (near->lat + part / near->bw) + n_far * (far->lat + part / far->bw);
        break;
    }
    default: s = slow->lat + bytes / slow->bw;   // point to point
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

// Bytes one call sends across nodes per device (the far terms of perf_call_ms).
static double far_bytes(int coll, int n, double bytes, int n_far) {
    switch (coll) {
    case COLL_ALLREDUCE: return 2.0 * n_far * bytes / n;
    case COLL_ALLGATHER: return (double)n_far * bytes;
    default: return (double)n_far * bytes / n;   // reduce-scatter, all-to-all
    }
}

// The stage's collectives in one step; *per_mb gets those that stretch each micro-batch's forward
// and backward (TP, EP), the rest run once, around the optimizer. Pipeline messages are costed by
// msg_of and placed by the schedule's simulation. A link with a token bucket (inter.burst): between
// two TP/EP calls that cross nodes the uplink rests while the stage computes and its in-node calls
// run, and refills; each such call sends up to min(burst, rest × bandwidth) of its bytes at once
// (the compute as the step sees it: compute_ms over shared_by, as step_of counts it).
static double comm_of(Prediction *p, const Traffic *t, const Layout *y, int s, const Cluster *cl, double *per_mb) {
    double total = 0, rest_ms = p->compute_ms / fmax(1, cl->shared_by), far_calls = 0, far_b[COLL_N][GROUP_N] = {{0}};
    *per_mb = 0;
    for (int g = 0; g < GROUP_N; g++) {
        int far, n = members(y, g, s, cl, &far);
        for (int c = 0; c < COLL_N; c++) {
            const Flow *f = &t->f[c][g];
            if (f->calls <= 0 || (g == GROUP_PP && c == COLL_SENDRECV)) continue;
            double ms = f->calls * perf_call_ms(c, n, f->bytes / f->calls, &cl->intra, &cl->inter, far);
            if (g == GROUP_TP || g == GROUP_EP) {
                ms += f->calls * cl->meet * 1e3 * 3 * (n - 1) / (n + 1);   // peers met between compute
                *per_mb += ms;
                if (far) { far_calls += f->calls; far_b[c][g] = far_bytes(c, n, f->bytes / f->calls, far); }
                else rest_ms += ms;
            }
            p->coll_ms[c][g] = ms;
            total += ms;
        }
    }
    if (cl->inter.burst <= 0 || far_calls == 0) return total;
    double credit = fmin(cl->inter.burst, rest_ms / far_calls * 1e-3 * cl->inter.bw);
    for (int g = 0; g < GROUP_N; g++)
        for (int c = 0; c < COLL_N; c++) {
            double saved = t->f[c][g].calls * fmin(credit, far_b[c][g]) / cl->inter.bw * 1e3;
            p->coll_ms[c][g] -= saved;
            total -= saved;
            *per_mb -= saved;
        }
    return total;
}

// One pipeline message from stage s to the next stage (a gradient back takes as long).
static double msg_of(const Traffic *t, const Layout *y, int s, const Cluster *cl) {
    const Flow *f = &t->f[COLL_SENDRECV][GROUP_PP];
    if (f->calls <= 0) return 0;
    int far = layout_rank(y, s, 0, 0) / cl->per_node != layout_rank(y, (s + 1) % y->pp, 0, 0) / cl->per_node;
    return perf_call_ms(COLL_SENDRECV, 2, f->bytes / f->calls, &cl->intra, &cl->inter, far);
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
// *per_mb gets the part hidden inside the micro-batches (the experts' chunks).
static double hidden_ms(const Prediction *q, const ModelConfig *m, int T, const Layout *y, int s, double rate,
                        double *per_mb) {
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
    *per_mb = hidden;
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

void perf_layout_config(Config *k, const Config *c, const Layout *y) {
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

// The pipeline's span: every stage's list (parallel/schedule) run against the others with each
// micro-batch's forward and backward at its stage's cost (work_ms[s]: a step's compute on the path
// and per-micro-batch communication) and each message at msg_ms[s]. pp = 1 gives work_ms[0].
static double pipe_span(const Config *k, const Layout *y, const double *work_ms, const double *msg_ms, int with_msgs) {
    int v = k->pp_schedule == PP_INTERLEAVED ? k->pp_virtual : 1, nch = y->pp * v;
    double *f = ted_alloc(sizeof(double) * 3 * nch, MEM_TEMP), *b = f + nch, *msg = b + nch;
    double parts = 3 + y->ckpt, per = (double)y->accum * v;   // a forward is 1 part, the backward 2 (+ recompute)
    for (int c = 0; c < nch; c++) {
        int s = c % y->pp;
        f[c] = work_ms[s] / parts / per;
        b[c] = work_ms[s] * (parts - 1) / parts / per;
        msg[c] = msg_ms[s];
    }
    double span = sched_simulate(k->pp_schedule, y->pp, v, y->accum, &(SchedCost){f, b, with_msgs ? msg : NULL});
    ted_free(f);
    return span;
}

// Step time: the pipeline's span, then the slowest stage's once-per-step collectives (once_ms).
// With devices that share compute units (shared_by > 1), a device idle in the bubble or waiting on
// a collective lends its share to the others, so compute on the path runs shared_by× faster, and
// the step is the longer of that path and the mean device's compute at the shared rate (a rank that
// waits yields its core: Open MPI's yield_when_idle, passive OpenMP threads).
static void step_of(Prediction *p, const Config *k, const Layout *y, const double *work_ms, const double *msg_ms,
                    double once_ms, double mean_busy, double lone) {
    double span = pipe_span(k, y, work_ms, msg_ms, 1), msgs = span - pipe_span(k, y, work_ms, msg_ms, 0);
    p->compute_ms /= lone;
    p->coll_ms[COLL_SENDRECV][GROUP_PP] = msgs;
    p->comm_ms += msgs;
    p->step_ms = span + once_ms;
    p->bubble_ms = fmax(0, p->step_ms - p->compute_ms - p->comm_ms);
    if (mean_busy > p->step_ms) {   // the cores busy all step: waits hide behind the others' work
        p->step_ms = mean_busy;
        p->compute_ms = mean_busy - p->comm_ms;
        p->bubble_ms = 0;
    }
}

// The optimizer's up-cast buffer (16-bit gradients): fp32 for one tile, or with tiling off for every
// element of the rank's optimizer shards (12 bytes of master, m and v each; offloaded: none here).
static double opt_temp(const Config *c, const Layout *y, const MemPlan *mp) {
    if (y->wbytes == 4 || (c->device == DEV_CUDA && !c->fp16)) return 0;   // fp32 gradients (a GPU's bf16) are read in place
    double shard = mp->optimizer / 12;
    return 4 * (c->tile_size > 0 && c->tile_size < shard ? (double)c->tile_size : shard);
}

// Stage s's memory: memplan's model state and activations, and the optimizer's up-cast buffer.
static void stage_memory(Prediction *q, const Config *c, const Config *k, const Layout *y, int s) {
    Topology top;
    MemPlan mp;
    memplan_topology(&top, y->tp, y->ep, y->pp, y->dp, s);
    memplan_of(&mp, k, &top, c->device == DEV_CUDA);
    q->state_bytes = mp.state;
    q->act_bytes = mp.act;
    q->opt_temp_bytes = opt_temp(c, y, &mp);
    q->mem_bytes = mp.state + fmax(mp.act, q->opt_temp_bytes);
}

void perf_predict(Prediction *p, const Config *c, const Layout *y, const Cluster *cl) {
    memset(p, 0, sizeof *p);
    const ModelConfig *m = &c->model;
    int T = cfg_seq_len(c);
    double rate = cl->peak * cl->gemm_eff, worst = -1, mean = 0, once = 0, lone = cl->shared_by > 1 ? cl->shared_by : 1;
    double *work = ted_alloc(sizeof(double) * 2 * y->pp, MEM_TEMP), *msg = work + y->pp;
    Prediction time, full;
    memset(&full, 0, sizeof full);
    Config k;
    perf_layout_config(&k, c, y);
    for (int s = 0; s < y->pp; s++) {
        Traffic t;
        Prediction q;
        memset(&q, 0, sizeof q);
        traffic_of(&t, m, T, y, s);
        double per_mb, hidden_mb;
        q.compute_ms = stage_flops(m, T, y, s) / rate * 1e3;
        q.comm_ms = comm_of(&q, &t, y, s, cl, &per_mb);
        q.hidden_ms = hidden_ms(&q, m, T, y, s, rate, &hidden_mb);
        q.comm_ms -= q.hidden_ms;
        work[s] = q.compute_ms / lone + per_mb - hidden_mb;
        msg[s] = msg_of(&t, y, s, cl);
        once = fmax(once, q.comm_ms - (per_mb - hidden_mb));
        mean += q.compute_ms / y->pp;
        stage_memory(&q, c, &k, y, s);
        double path = q.compute_ms / lone + q.comm_ms;
        if (path > worst) { worst = path; time = q; time.slowest = s; }
        if (q.mem_bytes > full.mem_bytes) full = q;
    }
    *p = time;   // the slowest stage's time, the fullest stage's memory
    p->mem_bytes = full.mem_bytes; p->state_bytes = full.state_bytes; p->act_bytes = full.act_bytes;
    p->opt_temp_bytes = full.opt_temp_bytes;
    step_of(p, &k, y, work, msg, once, mean, lone);
    ted_free(work);
    p->fits = p->mem_bytes <= cl->mem;
}
