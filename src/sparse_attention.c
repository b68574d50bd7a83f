// sparse_attention.c — block-sparse causal attention (see sparse_attention.h).
// Forward, per (batch, head, query block i) in parallel:
//   S_ij = Q_i·K_jᵀ/√hd on the present blocks j of row i; P = softmax over the row's present
//   keys (causal inside the diagonal block); O_i = Σ_j P_ij·V_j.
// Backward in three parallel passes, so no two threads add into the same rows:
//   columns: dV_j = Σ_i P_ijᵀ·dO_i
//   rows:    dP_ij = dO_i·V_jᵀ, D = Σ_j rowsum(P_ij ⊙ dP_ij), dS_ij = P_ij ⊙ (dP_ij − D)/√hd
//            (written over P_ij), dQ_i = Σ_j dS_ij·K_j
//   columns: dK_j = Σ_i dS_ijᵀ·Q_i
// Block products go to OpenBLAS when a block is big enough for it to pay, else a plain loop.
#include "sparse_attention.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>

long sparse_attention_att_floats(const SparseLayout *L, int B) { return (long)B * L->nnz * L->block * L->block; }
long sparse_attention_scratch_floats(const SparseLayout *L) { return (long)L->max_row * L->block * L->block; }

// C[m,n] = alpha·op(A)·op(B) + beta·C, row-major (op = transpose when ta / tb)
static void bgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    if ((long)m * n * k >= 32 * 32 * 32) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A,
                    lda, B, ldb, beta, C, ldc);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int l = 0; l < k; l++) s += (ta ? A[(long)l * lda + i] : A[(long)i * lda + l]) *
                                             (tb ? B[(long)j * ldb + l] : B[(long)l * ldb + j]);
            C[(long)i * ldc + j] = alpha * s + (beta == 0 ? 0 : beta * C[(long)i * ldc + j]);
        }
}

typedef struct {   // one call's shapes
    const SparseLayout *L;
    int B, T, H, hd, D, ld, blk, nbq;
    long bb;       // floats per stored block
    float scale;
} Shape;

static Shape shape_of(const SparseLayout *L, int B, int T, int H, int hd) {
    Shape s = {L, B, T, H, hd, H * hd, 3 * H * hd, L->block, (T + L->block - 1) / L->block,
               (long)L->block * L->block, 1.0f / sqrtf((float)hd)};
    return s;
}
static int rows_of(const Shape *s, int i) { int r = s->T - i * s->blk; return r < s->blk ? r : s->blk; }
static long row_at(const Shape *s, int h, int i) { return s->L->row[(long)h * (s->L->nb + 1) + i]; }
static long col_at(const Shape *s, int h, int j) { return s->L->cptr[(long)h * (s->L->nb + 1) + j]; }
// the q (k = +D, v = +2D) rows of block i of sequence b, head h
static const float *qkv_at(const Shape *s, const float *qkv, int b, int h, int i) {
    return qkv + ((long)b * s->T + (long)i * s->blk) * s->ld + h * s->hd;
}
static float *block_at(const Shape *s, float *att, int b, long p) { return att + ((long)b * s->L->nnz + p) * s->bb; }

// softmax over the present keys of row block i (r rows), causal inside the diagonal block
static void row_softmax(const Shape *s, float *att, int b, int h, int i, int r) {
    long p0 = row_at(s, h, i), p1 = row_at(s, h, i + 1);
    for (int t = 0; t < r; t++) {
        float mx = -INFINITY, sum = 0;
        for (long p = p0; p < p1; p++) {
            int j = s->L->col[p], c = j == i ? t + 1 : rows_of(s, j);
            const float *x = block_at(s, att, b, p) + (long)t * s->blk;
            for (int u = 0; u < c; u++) mx = x[u] > mx ? x[u] : mx;
        }
        for (long p = p0; p < p1; p++) {
            int j = s->L->col[p], c = j == i ? t + 1 : rows_of(s, j);
            float *x = block_at(s, att, b, p) + (long)t * s->blk;
            for (int u = 0; u < c; u++) { x[u] = expf(x[u] - mx); sum += x[u]; }
        }
        float inv = 1.0f / sum;
        for (long p = p0; p < p1; p++) {
            int j = s->L->col[p], c = j == i ? t + 1 : rows_of(s, j), cj = rows_of(s, j);
            float *x = block_at(s, att, b, p) + (long)t * s->blk;
            for (int u = 0; u < c; u++) x[u] *= inv;
            for (int u = c; u < cj; u++) x[u] = 0;   // above the diagonal
        }
    }
}

static void row_forward(const Shape *s, float *out, float *att, const float *qkv, int b, int h, int i) {
    int r = rows_of(s, i);
    long p0 = row_at(s, h, i), p1 = row_at(s, h, i + 1);
    const float *q = qkv_at(s, qkv, b, h, i);
    for (long p = p0; p < p1; p++) {
        int j = s->L->col[p];
        bgemm(0, 1, r, rows_of(s, j), s->hd, s->scale, q, s->ld, qkv_at(s, qkv, b, h, j) + s->D, s->ld, 0.0f,
              block_at(s, att, b, p), s->blk);
    }
    row_softmax(s, att, b, h, i, r);
    float *o = out + ((long)b * s->T + (long)i * s->blk) * s->D + h * s->hd;
    for (long p = p0; p < p1; p++) {
        int j = s->L->col[p];
        bgemm(0, 0, r, s->hd, rows_of(s, j), 1.0f, block_at(s, att, b, p), s->blk, qkv_at(s, qkv, b, h, j) + 2 * s->D,
              s->ld, p == p0 ? 0.0f : 1.0f, o, s->D);
    }
}

void sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B, int T,
                              int H, int hd) {
    Shape s = shape_of(L, B, T, H, hd);
    long n = (long)B * H * s.nbq;
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)
        row_forward(&s, out, att, qkv, (int)(x / ((long)H * s.nbq)), (int)(x / s.nbq % H), (int)(x % s.nbq));
}

// ---------------------------------------------------------------------------------------
// backward

// Over the present query blocks i < nbq of key block j: d(rows of j) = Σ_i blockᵀ·src_i, where
// src is dout (dV, from P) or q (dK, from dS). dst is the v or k part of dqkv.
static void column_pass(const Shape *s, float *dst, float *att, const float *src, int src_ld, int b, int h, int j) {
    int c = rows_of(s, j), first = 1;
    float *d = dst + ((long)b * s->T + (long)j * s->blk) * s->ld + h * s->hd;
    for (long e = col_at(s, h, j); e < col_at(s, h, j + 1); e++) {
        int i = s->L->crow[e];
        if (i >= s->nbq) break;
        const float *x = src + ((long)b * s->T + (long)i * s->blk) * src_ld + h * s->hd;
        bgemm(1, 0, c, s->hd, rows_of(s, i), 1.0f, block_at(s, att, b, s->L->cent[e]), s->blk, x, src_ld,
              first ? 0.0f : 1.0f, d, s->ld);
        first = 0;
    }
}

// dS of row block i over P (in place) and dQ_i; tmp holds the row's dP blocks
static void row_backward(const Shape *s, float *dqkv, const float *dout, float *att, const float *qkv, int b, int h,
                         int i, float *tmp) {
    int r = rows_of(s, i);
    long p0 = row_at(s, h, i), p1 = row_at(s, h, i + 1);
    const float *dO = dout + ((long)b * s->T + (long)i * s->blk) * s->D + h * s->hd;
    for (long p = p0; p < p1; p++) {
        int j = s->L->col[p];
        bgemm(0, 1, r, rows_of(s, j), s->hd, 1.0f, dO, s->D, qkv_at(s, qkv, b, h, j) + 2 * s->D, s->ld, 0.0f,
              tmp + (p - p0) * s->bb, s->blk);
    }
    for (int t = 0; t < r; t++) {
        float dsum = 0;
        for (long p = p0; p < p1; p++) {
            int c = rows_of(s, s->L->col[p]);
            const float *a = block_at(s, att, b, p) + (long)t * s->blk, *g = tmp + (p - p0) * s->bb + (long)t * s->blk;
            for (int u = 0; u < c; u++) dsum += a[u] * g[u];
        }
        for (long p = p0; p < p1; p++) {
            int c = rows_of(s, s->L->col[p]);
            float *a = block_at(s, att, b, p) + (long)t * s->blk;
            const float *g = tmp + (p - p0) * s->bb + (long)t * s->blk;
            for (int u = 0; u < c; u++) a[u] = a[u] * (g[u] - dsum) * s->scale;
        }
    }
    float *dq = dqkv + ((long)b * s->T + (long)i * s->blk) * s->ld + h * s->hd;
    for (long p = p0; p < p1; p++) {
        int j = s->L->col[p];
        bgemm(0, 0, r, s->hd, rows_of(s, j), 1.0f, block_at(s, att, b, p), s->blk, qkv_at(s, qkv, b, h, j) + s->D,
              s->ld, p == p0 ? 0.0f : 1.0f, dq, s->ld);
    }
}

void sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                               int B, int T, int H, int hd, float *scratch) {
    Shape s = shape_of(L, B, T, H, hd);
    long n = (long)B * H * s.nbq, per = (long)H * s.nbq, tmp = sparse_attention_scratch_floats(L);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // dV from P
        column_pass(&s, dqkv + 2 * s.D, att, dout, s.D, (int)(x / per), (int)(x / s.nbq % H), (int)(x % s.nbq));
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // P → dS, dQ
        row_backward(&s, dqkv, dout, att, qkv, (int)(x / per), (int)(x / s.nbq % H), (int)(x % s.nbq),
                     scratch + omp_get_thread_num() * tmp);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // dK from dS
        column_pass(&s, dqkv + s.D, att, qkv, s.ld, (int)(x / per), (int)(x / s.nbq % H), (int)(x % s.nbq));
}
