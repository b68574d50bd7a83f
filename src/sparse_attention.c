// sparse_attention.c — block-sparse causal attention (see sparse_attention.h).
// Storage: the present blocks of (sequence b, head h, query block i) lie side by side as one
// row-major strip [blk][n·blk] (n = the row's present blocks, ordered by key block: the
// diagonal one last), at the offset of the row's first entry.
// Forward, per (b, h, i) in parallel: the row's key and value blocks are gathered into [n·blk,hd]
// (zero rows past a partial last block), then S = Q_i·Kᵀ/√hd (one GEMM over the strip),
// P = softmax over the present keys (causal inside the diagonal block), O_i = P·V (one GEMM).
// Backward in three parallel passes, so no two threads add into the same rows:
//   columns: dV_j = Σ_i P_ijᵀ·dO_i                  (the column's blocks and dO rows gathered)
//   rows:    dP = dO_i·Vᵀ, D = rowsum(P ⊙ dP), dS = P ⊙ (dP − D)/√hd (written over P), dQ_i = dS·K
//   columns: dK_j = Σ_i dS_ijᵀ·Q_i
// Products go to OpenBLAS when they are big enough for it to pay, else a plain loop.
#include "sparse_attention.h"
#include "backend.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

long sparse_attention_att_floats(const SparseLayout *L, int B) { return (long)B * L->nnz * L->block * L->block; }

long sparse_attention_scratch_floats(const SparseLayout *L, int hd) {
    long blk = L->block, rows = (long)L->max_row * blk * (2 * hd + blk), cols = (long)L->max_col * blk * (blk + hd);
    return rows > cols ? rows : cols;
}

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
// rows of token block i of sequence b, head h, in a buffer of row stride ld (part: its column offset)
static const float *rows_at(const Shape *s, const float *x, long ld, int b, int h, int i) {
    return x + ((long)b * s->T + (long)i * s->blk) * ld + h * s->hd;
}
// the strip of row block i; *n its present blocks
static float *strip_at(const Shape *s, float *att, int b, int h, int i, int *n) {
    long p0 = row_at(s, h, i);
    *n = (int)(row_at(s, h, i + 1) - p0);
    return att + ((long)b * s->L->nnz + p0) * s->bb;
}

// copies rows rows of w floats (stride ld) into dst [blk, w], zeroing the rest of the block
static void copy_block(float *dst, const float *src, long ld, int rows, int w, int blk) {
    for (int t = 0; t < rows; t++) memcpy(dst + (long)t * w, src + (long)t * ld, sizeof(float) * w);
    memset(dst + (long)rows * w, 0, sizeof(float) * (blk - rows) * w);
}

// the key (part = D) or value (2D) rows of row block i's present blocks → g [n·blk, hd]
static void gather_row(const Shape *s, float *g, const float *qkv, long part, int b, int h, int i) {
    long p0 = row_at(s, h, i), p1 = row_at(s, h, i + 1);
    for (long p = p0; p < p1; p++) {
        int j = s->L->col[p];
        copy_block(g + (p - p0) * s->blk * s->hd, rows_at(s, qkv + part, s->ld, b, h, j), s->ld, rows_of(s, j), s->hd,
                   s->blk);
    }
}

// softmax of the strip's r rows over their present keys: all but the diagonal block, whose
// columns stop at the row itself (which also leaves out a partial last block's padding)
static void strip_softmax(float *S, long w, int r, int blk) {
    for (int t = 0; t < r; t++) {
        float *x = S + (long)t * w, mx = -INFINITY, sum = 0;
        long valid = w - blk + t + 1;
        for (long u = 0; u < valid; u++) mx = x[u] > mx ? x[u] : mx;
        for (long u = 0; u < valid; u++) { x[u] = expf(x[u] - mx); sum += x[u]; }
        float inv = 1.0f / sum;
        for (long u = 0; u < valid; u++) x[u] *= inv;
        for (long u = valid; u < w; u++) x[u] = 0;
    }
}

static void row_forward(const Shape *s, float *out, float *att, const float *qkv, int b, int h, int i, float *scr) {
    int r = rows_of(s, i), n;
    float *S = strip_at(s, att, b, h, i, &n), *kg = scr, *vg = scr + (long)s->L->max_row * s->blk * s->hd;
    long w = (long)n * s->blk;
    gather_row(s, kg, qkv, s->D, b, h, i);
    gather_row(s, vg, qkv, 2 * s->D, b, h, i);
    bgemm(0, 1, r, (int)w, s->hd, s->scale, rows_at(s, qkv, s->ld, b, h, i), s->ld, kg, s->hd, 0.0f, S, (int)w);
    strip_softmax(S, w, r, s->blk);
    bgemm(0, 0, r, s->hd, (int)w, 1.0f, S, (int)w, vg, s->hd, 0.0f, (float *)rows_at(s, out, s->D, b, h, i), s->D);
}

void sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B, int T,
                              int H, int hd, float *scratch) {
    ON_GPU(cu_sparse_attention_forward(out, att, qkv, L, B, T, H, hd));
    Shape s = shape_of(L, B, T, H, hd);
    long n = (long)B * H * s.nbq, per = sparse_attention_scratch_floats(L, hd);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)
        row_forward(&s, out, att, qkv, (int)(x / ((long)H * s.nbq)), (int)(x / s.nbq % H), (int)(x % s.nbq),
                    scratch + omp_get_thread_num() * per);
}

// ---------------------------------------------------------------------------------------
// backward

// Key block j's rows of dst (the v or k part of dqkv) = Σ_i blockᵀ·src_i over its present query
// blocks i < nbq: the blocks (P for dV, dS for dK) and src's rows (dout, or q) are gathered first.
static void column_pass(const Shape *s, float *dst, float *att, const float *src, long src_ld, int b, int h, int j,
                        float *scr) {
    long e0 = col_at(s, h, j), e1 = col_at(s, h, j + 1), m = 0;
    float *pg = scr, *xg = scr + (long)s->L->max_col * s->bb;
    for (long e = e0; e < e1 && s->L->crow[e] < s->nbq; e++, m++) {
        int i = s->L->crow[e], n, r = rows_of(s, i);
        float *S = strip_at(s, att, b, h, i, &n);
        long k = s->L->cent[e] - row_at(s, h, i);   // the block's place in its strip
        copy_block(pg + m * s->bb, S + k * s->blk, (long)n * s->blk, r, s->blk, s->blk);
        copy_block(xg + m * s->blk * s->hd, rows_at(s, src, src_ld, b, h, i), src_ld, r, s->hd, s->blk);
    }
    bgemm(1, 0, rows_of(s, j), s->hd, (int)(m * s->blk), 1.0f, pg, s->blk, xg, s->hd, 0.0f,
          dst + ((long)b * s->T + (long)j * s->blk) * s->ld + h * s->hd, s->ld);
}

// dS of row block i over P (in place) and dQ_i
static void row_backward(const Shape *s, float *dqkv, const float *dout, float *att, const float *qkv, int b, int h,
                         int i, float *scr) {
    int r = rows_of(s, i), n;
    float *S = strip_at(s, att, b, h, i, &n), *kg = scr, *vg = kg + (long)s->L->max_row * s->blk * s->hd;
    float *dP = vg + (long)s->L->max_row * s->blk * s->hd;
    long w = (long)n * s->blk;
    gather_row(s, kg, qkv, s->D, b, h, i);
    gather_row(s, vg, qkv, 2 * s->D, b, h, i);
    bgemm(0, 1, r, (int)w, s->hd, 1.0f, rows_at(s, dout, s->D, b, h, i), s->D, vg, s->hd, 0.0f, dP, (int)w);
    for (int t = 0; t < r; t++) {
        float *a = S + t * w, *g = dP + t * w, dsum = 0;
        for (long u = 0; u < w; u++) dsum += a[u] * g[u];
        for (long u = 0; u < w; u++) a[u] = a[u] * (g[u] - dsum) * s->scale;
    }
    bgemm(0, 0, r, s->hd, (int)w, 1.0f, S, (int)w, kg, s->hd, 0.0f, dqkv + ((long)b * s->T + (long)i * s->blk) * s->ld +
          h * s->hd, s->ld);
}

void sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                               int B, int T, int H, int hd, float *scratch) {
    ON_GPU(cu_sparse_attention_backward(dqkv, dout, att, qkv, L, B, T, H, hd));
    Shape s = shape_of(L, B, T, H, hd);
    long n = (long)B * H * s.nbq, per = (long)H * s.nbq, tmp = sparse_attention_scratch_floats(L, hd);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // dV from P
        column_pass(&s, dqkv + 2 * s.D, att, dout, s.D, (int)(x / per), (int)(x / s.nbq % H), (int)(x % s.nbq),
                    scratch + omp_get_thread_num() * tmp);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // P → dS, dQ
        row_backward(&s, dqkv, dout, att, qkv, (int)(x / per), (int)(x / s.nbq % H), (int)(x % s.nbq),
                     scratch + omp_get_thread_num() * tmp);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // dK from dS
        column_pass(&s, dqkv + s.D, att, qkv, s.ld, (int)(x / per), (int)(x / s.nbq % H), (int)(x % s.nbq),
                    scratch + omp_get_thread_num() * tmp);
}
