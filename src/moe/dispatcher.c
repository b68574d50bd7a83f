// dispatcher.c — gather by expert, weighted scatter-back (see dispatcher.h).
#include "core/backend.h"
#include "core/half.h"
#include "moe/dispatcher.h"
#include "moe/moe_cuda.h"
#include <string.h>
#include "parallel/comm.h"
#include "core/util.h"

void dispatch_plan(int *row, long *exp_rows, long *start, const int *choice, const int *slot, const int *kept,
                   long N, int k, const RouterCfg *c, int padded, int multiple) {
    ON_GPU(cu_dispatch_plan(row, exp_rows, start, choice, slot, kept, N, k, c, padded, multiple));
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
        r = first + (r - first + multiple - 1) / multiple * multiple;   // DTD splits each expert's rows over TP
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
    int P = x->ep->size, El = x->El, q = x->dtd ? x->tp->size : 1;
    // what each source sends to each of my experts: counts travel first unless every rank's
    // sizes are known to be the same (capacity mode with equal batches: E·C slots each).
    // With DTD a rank sends its 1/tp share of each expert's rows.
    for (int e = 0; e < x->E; e++) x->scnt[e] = exp_rows[e] / q;
    if (known_sizes) {
        for (int s = 0; s < P; s++)
            for (int l = 0; l < El; l++) x->rcnt[s * El + l] = x->scnt[x->ep->rank * El + l];
    } else
        comm_alltoall(x->ep, x->scnt, x->rcnt, El, DT_I64);
    x->Rs = 0;
    for (int e = 0; e < x->E; e++) x->Rs += exp_rows[e];
    long r = 0;
    for (int l = 0; l < El; l++) {
        x->exp_off[l] = r;
        for (int s = 0; s < P; s++) r += x->rcnt[s * El + l] * q;
    }
    x->exp_off[El] = x->Rr = r;
}

void exchange_counts(const Exchange *x, int d, long *sc, long *sd, long *rc, long *rd) {
    int P = x->ep->size, El = x->El;
    long so = 0, ro = 0;
    for (int s = 0; s < P; s++) {
        long a = 0, b = 0;
        for (int l = 0; l < El; l++) { a += x->scnt[s * El + l]; b += x->rcnt[s * El + l]; }
        sc[s] = a * d; sd[s] = so; so += sc[s];
        rc[s] = b * d; rd[s] = ro; ro += rc[s];
    }
}

// Copies rows between [source][local expert][rcnt] (the all-to-all order) and the expert side
// [local expert][source][rcnt].
static void reorder(const Exchange *x, float *a2a_side, float *exp_side, int d, int to_exp) {
    int P = x->ep->size, El = x->El;
    long at = 0;
    for (int s = 0; s < P; s++)
        for (int l = 0; l < El; l++) {
            long n = x->rcnt[s * El + l], dst = x->exp_off[l];
            for (int q = 0; q < s; q++) dst += x->rcnt[q * El + l];
            if (to_exp) buf_copy(exp_side + dst * d, a2a_side + at * d, sizeof(float) * n * d);
            else buf_copy(a2a_side + at * d, exp_side + dst * d, sizeof(float) * n * d);
            at += n;
        }
}

// Moves rows between the token side [Rs] (ordered by global expert) and the expert side [Rr]
// (ordered by local expert, then source rank) through the all-to-all buffer [source][expert].
static void exchange(Exchange *x, const float *in, float *buf, float *out, int d, int to_experts) {
    int P = x->ep->size;
    if (P == 1) { if (in != out) buf_copy(out, in, sizeof(float) * (to_experts ? x->Rr : x->Rs) * d); return; }
    long cnt[4 * 64] = {0}, *sc = cnt, *sd = cnt + P, *rc = cnt + 2 * P, *rd = cnt + 3 * P;
    CHECK(P <= 64, "expert-parallel groups of more than 64 ranks are not supported (ep %d)", P);
    exchange_counts(x, d, sc, sd, rc, rd);
    if (to_experts) {
        comm_alltoallv(x->ep, in, sc, sd, buf, rc, rd, DT_F32);     // buf: [source][local expert][rows]
        reorder(x, buf, out, d, 1);
    } else {
        reorder(x, buf, (float *)in, d, 0);
        comm_alltoallv(x->ep, buf, rc, rd, out, sc, sd, DT_F32);    // back to [global expert][rows]
    }
}

// Duplicate token dropping (design §5): the TP ranks of a group hold the same tokens, so each
// sends only its 1/tp share of every expert's rows, and the TP group puts the rows together
// again on either side: all-gather after the first all-to-all; reduce-scatter (the sum of
// the expert shards) before the second and all-gather after it. buf holds 2·max(Rs, Rr) rows.
static void exchange_dtd(Exchange *x, const float *in, float *buf, float *out, int d, int to_experts, DType t) {
    int P = x->ep->size, El = x->El, E = x->E, tp = x->tp->size, j = x->tp->rank;
    long cnt[4 * 64] = {0}, *sc = cnt, *sd = cnt + P, *rc = cnt + 2 * P, *rd = cnt + 3 * P;
    CHECK(P <= 64, "expert-parallel groups of more than 64 ranks are not supported (ep %d)", P);
    exchange_counts(x, d, sc, sd, rc, rd);
    long slice_s = x->Rs / tp, slice_r = x->Rr / tp;   // rows one TP rank sends / receives
    float *A = buf, *B = buf + (x->Rs > x->Rr ? x->Rs : x->Rr) * d;
    if (to_experts) {
        long at = 0, off = 0;                            // my share of each expert's token-side rows
        for (int e = 0; e < E; e++) {
            long q = x->scnt[e];
            buf_copy(A + at * d, in + (off + j * q) * d, sizeof(float) * q * d);
            at += q; off += q * tp;
        }
        comm_alltoallv(x->ep, A, sc, sd, B, rc, rd, DT_F32);         // B: [source][expert][q]
        comm_allgather(x->tp, B, A, slice_r * d, DT_F32);             // A: [tp][source][expert][q]
        // expert side [expert][source][tp][q]: each (expert, source) block is its tp shares in order
        for (int t = 0; t < tp; t++) {
            long at2 = 0;
            for (int s = 0; s < P; s++)
                for (int l = 0; l < El; l++) {
                    long n = x->rcnt[s * El + l], dst = x->exp_off[l];
                    for (int q = 0; q < s; q++) dst += x->rcnt[q * El + l] * tp;
                    buf_copy(out + (dst + t * n) * d, A + (t * slice_r + at2) * d, sizeof(float) * n * d);
                    at2 += n;
                }
        }
    } else {
        for (int t = 0; t < tp; t++) {                   // [tp][source][expert][q] for the reduce-scatter
            long at2 = 0;
            for (int s = 0; s < P; s++)
                for (int l = 0; l < El; l++) {
                    long n = x->rcnt[s * El + l], src = x->exp_off[l];
                    for (int q = 0; q < s; q++) src += x->rcnt[q * El + l] * tp;
                    buf_copy(A + (t * slice_r + at2) * d, in + (src + t * n) * d, sizeof(float) * n * d);
                    at2 += n;
                }
        }
        comm_reduce_scatter(x->tp, A, B, slice_r * d * (t == DT_BF16 ? 2 : 1), t);   // B: my share, summed over f
        comm_alltoallv(x->ep, B, rc, rd, A, sc, sd, DT_F32);          // A: [expert][q], this rank's share
        comm_allgather(x->tp, A, B, slice_s * d, DT_F32);             // B: [tp][expert][q]
        long off = 0, at = 0;
        for (int e = 0; e < E; e++) {
            long q = x->scnt[e];
            for (int t = 0; t < tp; t++) buf_copy(out + (off + t * q) * d, B + (t * slice_s + at) * d, sizeof(float) * q * d);
            at += q; off += q * tp;
        }
    }
}

void exchange_to_experts(Exchange *x, const float *tok_side, float *buf, float *exp_side, int d) {
    if (x->dtd) exchange_dtd(x, tok_side, buf, exp_side, d, 1, DT_F32);   // copies only
    else exchange(x, tok_side, buf, exp_side, d, 1);
}
void exchange_to_tokens(Exchange *x, const float *exp_side, float *buf, float *tok_side, int d, DType t) {
    if (x->dtd) exchange_dtd(x, exp_side, buf, tok_side, d, 0, t);
    else exchange(x, exp_side, buf, tok_side, d, 0);
}

void dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d, int half) {
    ON_GPU(cu_dispatch_forward(xin, x, row, N, k, d, half));
    size_t bytes = (half ? sizeof(uint16_t) : sizeof(float)) * d;
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            if (row[t * k + j] >= 0) memcpy((char *)xin + row[t * k + j] * bytes, (const char *)x + t * bytes, bytes);
}

// o[0..d) += g · row r of src (half: src's rows are bf16), the element type chosen once a row
static inline void add_row(float *o, float g, const float *src, int half, long r, int d) {
    if (half) {
        const uint16_t *s = (const uint16_t *)src + r * d;
        for (int c = 0; c < d; c++) o[c] += g * bf16_to_f32(s[c]);
    } else {
        const float *s = src + r * d;
        for (int c = 0; c < d; c++) o[c] += g * s[c];
    }
}

void dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d, int half) {
    ON_GPU(cu_dispatch_backward(dx, dxin, row, N, k, d, half));
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            if (row[t * k + j] >= 0) add_row(dx + t * d, 1.0f, dxin, half, row[t * k + j], d);   // 1·x is x
}

void combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d, int y16) {
    ON_GPU(cu_combine_forward(out, y, gate, row, N, k, d, y16));
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            if (row[t * k + j] >= 0) add_row(out + t * d, gate[t * k + j], y, y16, row[t * k + j], d);
}

void combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                      const int *row, long N, int k, int d, int half, int y16) {
    ON_GPU(cu_combine_backward(dy, dgate, dout, y, gate, row, N, k, d, half, y16));
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int r = row[t * k + j];
            dgate[t * k + j] = 0;
            if (r < 0) continue;
            const float *go = dout + t * d, *yr = y + (long)r * d;
            float g = gate[t * k + j], dot = 0;
            if (half) {
                uint16_t *dr = (uint16_t *)dy + (long)r * d;
                for (int c = 0; c < d; c++) dr[c] = bf16_from_f32(g * go[c]);
            } else {
                float *dr = dy + (long)r * d;
                #pragma omp simd
                for (int c = 0; c < d; c++) dr[c] = g * go[c];
            }
            if (y16) {
                const uint16_t *y16r = (const uint16_t *)y + (long)r * d;
                for (int c = 0; c < d; c++) dot += bf16_to_f32(y16r[c]) * go[c];
            } else {
                #pragma omp simd reduction(+ : dot)
                for (int c = 0; c < d; c++) dot += yr[c] * go[c];
            }
            dgate[t * k + j] = dot;
        }
}
