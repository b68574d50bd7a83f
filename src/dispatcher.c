// dispatcher.c — gather by expert, weighted scatter-back (see dispatcher.h).
#include "dispatcher.h"
#include <string.h>
#include "comm.h"
#include "util.h"

void dispatch_plan(int *row, long *exp_rows, long *start, const int *choice, const int *slot, const int *kept,
                   long N, int k, const RouterCfg *c, int padded) {
    int E = c->E, G = router_ngroups(N, c->group_tokens);
    int capacity = padded && c->capacity_factor > 0;
    long r = 0;   // start[g][e]: first row of (group g, expert e)
    for (int e = 0; e < E; e++) {
        long first = r;
        for (int g = 0; g < G; g++) {
            start[(long)g * E + e] = r;
            if (capacity) {
                long t0 = (long)g * c->group_tokens, S = N - t0 < c->group_tokens ? N - t0 : c->group_tokens;
                r += router_capacity(c, S);
            } else r += kept[(long)g * E + e];
        }
        exp_rows[e] = r - first;
    }
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++) {
        long g = t / c->group_tokens;
        for (int j = 0; j < k; j++) {
            int s = slot[t * k + j];
            row[t * k + j] = s < 0 ? -1 : (int)(start[g * E + choice[t * k + j]] + s);
        }
    }
}

// ---------------------------------------------------------------------------------------
// expert-parallel exchange

void exchange_plan(Exchange *x, const long *exp_rows, int known_sizes) {
    int P = x->ep->size, El = x->El;
    // what each source sends to each of my experts: counts travel first unless every rank's
    // sizes are known to be the same (capacity mode with equal batches: E·C slots each)
    for (int e = 0; e < x->E; e++) x->scnt[e] = exp_rows[e];
    if (known_sizes) {
        for (int s = 0; s < P; s++)
            for (int l = 0; l < El; l++) x->rcnt[s * El + l] = exp_rows[x->ep->rank * El + l];
    } else
        comm_alltoall(x->ep, x->scnt, x->rcnt, El, DT_I64);
    x->Rs = 0;
    for (int e = 0; e < x->E; e++) x->Rs += x->scnt[e];
    long r = 0;
    for (int l = 0; l < El; l++) {
        x->exp_off[l] = r;
        for (int s = 0; s < P; s++) r += x->rcnt[s * El + l];
    }
    x->exp_off[El] = x->Rr = r;
}

// Moves rows between the token side [Rs] (ordered by global expert) and the expert side [Rr]
// (ordered by local expert, then source rank) through the all-to-all buffer [source][expert].
static void exchange(Exchange *x, const float *in, float *buf, float *out, int d, int to_experts) {
    int P = x->ep->size, El = x->El;
    if (P == 1) { if (in != out) memcpy(out, in, sizeof(float) * (to_experts ? x->Rr : x->Rs) * d); return; }
    long cnt[4 * 64] = {0}, *sc = cnt, *sd = cnt + P, *rc = cnt + 2 * P, *rd = cnt + 3 * P, so = 0, ro = 0;
    CHECK(P <= 64, "expert-parallel groups of more than 64 ranks are not supported (ep %d)", P);
    for (int s = 0; s < P; s++) {
        long a = 0, b = 0;
        for (int l = 0; l < El; l++) { a += x->scnt[s * El + l]; b += x->rcnt[s * El + l]; }
        sc[s] = a * d; sd[s] = so; so += sc[s];
        rc[s] = b * d; rd[s] = ro; ro += rc[s];
    }
    if (to_experts) {
        comm_alltoallv(x->ep, in, sc, sd, buf, rc, rd, DT_F32);     // buf: [source][local expert][rows]
        long at = 0;
        for (int s = 0; s < P; s++)
            for (int l = 0; l < El; l++) {
                long n = x->rcnt[s * El + l], dst = x->exp_off[l];
                for (int q = 0; q < s; q++) dst += x->rcnt[q * El + l];
                memcpy(out + dst * d, buf + at * d, sizeof(float) * n * d);
                at += n;
            }
    } else {
        long at = 0;
        for (int s = 0; s < P; s++)
            for (int l = 0; l < El; l++) {
                long n = x->rcnt[s * El + l], src = x->exp_off[l];
                for (int q = 0; q < s; q++) src += x->rcnt[q * El + l];
                memcpy(buf + at * d, in + src * d, sizeof(float) * n * d);
                at += n;
            }
        comm_alltoallv(x->ep, buf, rc, rd, out, sc, sd, DT_F32);    // back to [global expert][rows]
    }
}

void exchange_to_experts(Exchange *x, const float *tok_side, float *buf, float *exp_side, int d) {
    exchange(x, tok_side, buf, exp_side, d, 1);
}
void exchange_to_tokens(Exchange *x, const float *exp_side, float *buf, float *tok_side, int d) {
    exchange(x, exp_side, buf, tok_side, d, 0);
}

void dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            if (row[t * k + j] >= 0) memcpy(xin + (long)row[t * k + j] * d, x + t * d, sizeof(float) * d);
}

void dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            if (row[t * k + j] < 0) continue;
            const float *s = dxin + (long)row[t * k + j] * d;
            float *o = dx + t * d;
            for (int c = 0; c < d; c++) o[c] += s[c];
        }
}

void combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            if (row[t * k + j] < 0) continue;
            const float *s = y + (long)row[t * k + j] * d;
            float g = gate[t * k + j], *o = out + t * d;
            for (int c = 0; c < d; c++) o[c] += g * s[c];
        }
}

void combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                      const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int r = row[t * k + j];
            dgate[t * k + j] = 0;
            if (r < 0) continue;
            const float *go = dout + t * d, *yr = y + (long)r * d;
            float g = gate[t * k + j], dot = 0, *dr = dy + (long)r * d;
            for (int c = 0; c < d; c++) { dr[c] = g * go[c]; dot += yr[c] * go[c]; }
            dgate[t * k + j] = dot;
        }
}
