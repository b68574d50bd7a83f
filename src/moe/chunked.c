// chunked.c — the chunked expert-parallel exchange (see chunked.h).
#include "moe/chunked.h"
#include "core/backend.h"
#include "core/util.h"

static long cut(long rows, int i, int n) { return rows * i / n; }   // first row of chunk i of a block

// Chunk i as an exchange of its own (counts into scnt[E], rcnt[ep·El], off[El+1]); s0 and r0 get
// the token-side and expert-side rows (all TP shares) of the chunks before it.
static Exchange view(const Chunked *c, int i, long *scnt, long *rcnt, long *off, long *s0, long *r0) {
    const Exchange *x = c->x;
    int P = x->ep->size, El = x->El;
    Exchange v = *x;
    v.scnt = scnt; v.rcnt = rcnt; v.exp_off = off; v.Rs = 0; *s0 = *r0 = 0;
    for (int e = 0; e < x->E; e++) {
        scnt[e] = cut(x->scnt[e], i + 1, c->n) - cut(x->scnt[e], i, c->n);
        v.Rs += scnt[e] * c->q; *s0 += cut(x->scnt[e], i, c->n) * c->q;
    }
    for (int s = 0; s < P * El; s++) {
        rcnt[s] = cut(x->rcnt[s], i + 1, c->n) - cut(x->rcnt[s], i, c->n);
        *r0 += cut(x->rcnt[s], i, c->n) * c->q;
    }
    long r = 0;
    for (int l = 0; l < El; l++) {
        off[l] = r;
        for (int s = 0; s < P; s++) r += rcnt[s * El + l] * c->q;
    }
    off[El] = v.Rr = r;
    return v;
}

// The scratch regions of chunk i (rows): SND my share of its token side, RCV my share of its expert
// side, WIDE its whole expert side and TOKW its whole token side (the last two for DTD's TP steps).
enum { SND, RCV, WIDE, TOKW };
static float *region(const Chunked *c, int which, long s0, long r0) {
    long Rs = c->x->Rs, Rr = c->x->Rr, at = which == SND ? s0 / c->q : which == RCV ? Rs + r0 / c->q
                                            : which == WIDE ? Rs + Rr + r0 : Rs + 2 * Rr + s0;
    return c->scr + at * c->d;
}

long chunked_scratch_rows(long Rs, long Rr) { return 2 * (Rs + Rr); }

Chunked chunked_make(Exchange *x, int n, int d, float *scratch) {
    Chunked c = {.x = x, .n = n, .d = d, .q = x->dtd ? x->tp->size : 1, .j = x->dtd ? x->tp->rank : 0, .scr = scratch};
    CHECK(n >= 1 && n <= MAX_OVERLAP, "overlap degree %d outside [1, %d]", n, MAX_OVERLAP);
    return c;
}

long chunked_rows(const Chunked *c, int i, long *off) {
    long E = c->x->E, scnt[E], rcnt[E], s0, r0;
    view(c, i, scnt, rcnt, off, &s0, &r0);
    return r0;
}

// Rows between the token side and the chunk's share-major buffer [t][expert][rows] (t < shares):
// to_buf packs my share (shares = 1, t = j), else unpacks every share.
static void token_rows(const Chunked *c, int i, const long *scnt, float *tok, float *buf, int shares, int to_buf) {
    long slice = 0, d = c->d;
    for (int e = 0; e < c->x->E; e++) slice += scnt[e];
    for (int t = 0; t < shares; t++) {
        long at = t * slice, off = 0;
        for (int e = 0; e < c->x->E; e++) {
            long n = c->x->scnt[e], row = off + (to_buf ? c->j : t) * n + cut(n, i, c->n);
            if (to_buf) buf_copy(buf + at * d, tok + row * d, sizeof(float) * scnt[e] * d);
            else buf_copy(tok + row * d, buf + at * d, sizeof(float) * scnt[e] * d);
            at += scnt[e]; off += n * c->q;
        }
    }
}

// Rows between the chunk's expert side [local expert][source][share][rows] and the all-to-all
// order [share][source][local expert][rows].
static void expert_rows(const Chunked *c, const Exchange *v, float *exp, float *buf, int to_exp) {
    int P = v->ep->size, El = v->El;
    long slice = v->Rr / c->q, d = c->d;
    for (int t = 0; t < c->q; t++) {
        long at = t * slice;
        for (int s = 0; s < P; s++)
            for (int l = 0; l < El; l++) {
                long n = v->rcnt[s * El + l], row = v->exp_off[l] + t * n;
                for (int p = 0; p < s; p++) row += v->rcnt[p * El + l] * c->q;
                if (to_exp) buf_copy(exp + row * d, buf + at * d, sizeof(float) * n * d);
                else buf_copy(buf + at * d, exp + row * d, sizeof(float) * n * d);
                at += n;
            }
    }
}

// DTD's TP steps per chunk, as non-blocking collectives waited for at once: the wait naps instead of
// spinning (comm_req_wait), leaving the core to a TP peer that may share it.
static void tp_allgather(Group *tp, const float *send, float *recv, long n) {
    CommReq r;
    comm_iallgather(tp, send, recv, n, DT_F32, &r);
    comm_req_wait(&r);
}
static void tp_reduce_scatter(Group *tp, const float *send, float *recv, long n) {
    CommReq r;
    comm_ireduce_scatter(tp, send, recv, n, DT_F32, &r);
    comm_req_wait(&r);
}

#define VIEW(i) long E_ = c->x->E, scnt[E_], rcnt[E_], off[c->x->El + 1], s0, r0; \
    Exchange v = view(c, i, scnt, rcnt, off, &s0, &r0); \
    long cnt[4 * 64] = {0}, *sc = cnt, *sd = cnt + 64, *rc = cnt + 128, *rd = cnt + 192; \
    CHECK(v.ep->size <= 64, "expert-parallel groups of more than 64 ranks are not supported (ep %d)", v.ep->size); \
    exchange_counts(&v, c->d, sc, sd, rc, rd)

void chunked_start_to_experts(Chunked *c, int i, const float *tok) {
    VIEW(i);
    float *snd = region(c, SND, s0, r0);
    token_rows(c, i, scnt, (float *)tok, snd, 1, 1);
    comm_ialltoallv(v.ep, snd, sc, sd, region(c, RCV, s0, r0), rc, rd, DT_F32, &c->req[i]);
}

void chunked_finish_to_experts(Chunked *c, int i, float *exp) {
    VIEW(i);
    comm_req_wait(&c->req[i]);
    float *buf = region(c, RCV, s0, r0);
    if (c->q > 1) {   // DTD: the TP group puts the shares together
        tp_allgather(v.tp, buf, region(c, WIDE, s0, r0), v.Rr / c->q * c->d);
        buf = region(c, WIDE, s0, r0);
    }
    expert_rows(c, &v, exp + r0 * c->d, buf, 1);
}

void chunked_start_to_tokens(Chunked *c, int i, const float *exp) {
    VIEW(i);
    float *rcv = region(c, RCV, s0, r0), *buf = c->q > 1 ? region(c, WIDE, s0, r0) : rcv;
    expert_rows(c, &v, (float *)exp + r0 * c->d, buf, 0);
    if (c->q > 1) tp_reduce_scatter(v.tp, buf, rcv, v.Rr / c->q * c->d);   // DTD: the sum of the f shards
    comm_ialltoallv(v.ep, rcv, rc, rd, region(c, SND, s0, r0), sc, sd, DT_F32, &c->req[i]);
}

void chunked_finish_to_tokens(Chunked *c, int i, float *tok) {
    VIEW(i);
    comm_req_wait(&c->req[i]);
    float *buf = region(c, SND, s0, r0);
    if (c->q > 1) {
        tp_allgather(v.tp, buf, region(c, TOKW, s0, r0), v.Rs / c->q * c->d);
        buf = region(c, TOKW, s0, r0);
    }
    token_rows(c, i, scnt, tok, buf, c->q, 0);
}

void chunked_run(Chunked *c, const float *tok_in, float *exp_in, float *exp_out, float *tok_out, ChunkedWork work,
                 void *ctx) {
    long off[c->x->El + 1];
    chunked_start_to_experts(c, 0, tok_in);
    for (int i = 0; i < c->n; i++) {
        if (i + 1 < c->n) chunked_start_to_experts(c, i + 1, tok_in);
        chunked_finish_to_experts(c, i, exp_in);
        comm_progress();
        long r0 = chunked_rows(c, i, off);
        int pt = c->thread ? comm_progress_thread_start() : 0;   // moves the requests while the experts run
        work(ctx, r0, off);
        comm_progress_thread_stop(pt);
        comm_progress();
        chunked_start_to_tokens(c, i, exp_out);
        if (i > 0) chunked_finish_to_tokens(c, i - 1, tok_out);
    }
    chunked_finish_to_tokens(c, c->n - 1, tok_out);
}
