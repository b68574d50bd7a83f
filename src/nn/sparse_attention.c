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
// Products go to the one GEMM (nn/gemm.h) when they are big enough for it to pay, else a plain loop.
// With the layout's `recompute`, nothing is stored: the forward softmaxes each strip in scratch,
// and the backward walks the query blocks in chunks of about sparse_attention_chunk_floats floats,
// recomputing the chunk's strips exactly as the forward did (same code, same inputs, so the same
// bits), then runs the three passes on them; the column passes add each chunk's share.
#include "nn/sparse_attention.h"
#include "nn/ops_cuda.h"
#include "core/backend.h"
#include "nn/gemm.h"
#include <math.h>
#include <omp.h>
#include <string.h>

long sparse_attention_att_floats(const SparseLayout *L, int B) {
    return L->recompute ? 0 : (long)B * L->nnz * L->block * L->block;
}
long sparse_attention_chunk_floats = 1L << 24;

long sparse_attention_scratch_floats(const SparseLayout *L, int hd) {
    long blk = L->block, rows = (long)L->max_row * blk * (2 * hd + blk), cols = (long)L->max_col * blk * (blk + hd);
    return rows > cols ? rows : cols;
}

// C[m,n] = alpha·op(A)·op(B) + beta·C, row-major (op = transpose when ta / tb); a product under 32³
// is a plain loop in fp32 compute, and the GEMM with bf16 inputs under bf16 compute
static void bgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    if ((long)m * n * k >= 32 * 32 * 32 || gemm_bf16_compute()) {
        gemm_cpu(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
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

// recompute: the query blocks [i0, i1) whose strips sit in buf, (b, h)'s first one at off[b·H + h]
typedef struct { int i0, i1; long *off; float *buf; } Chunk;

typedef struct {   // one call's shapes
    const SparseLayout *L;
    int B, T, H, hd, D, ld, blk, nbq;
    long bb;       // floats per stored block
    float scale;
    const Chunk *ch;   // recompute's current chunk; NULL when the strips are stored in att
} Shape;

static Shape shape_of(const SparseLayout *L, int B, int T, int H, int hd) {
    Shape s = {L, B, T, H, hd, H * hd, 3 * H * hd, L->block, (T + L->block - 1) / L->block,
               (long)L->block * L->block, 1.0f / sqrtf((float)hd), NULL};
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
    if (s->ch) return s->ch->buf + s->ch->off[(long)b * s->H + h] + (p0 - row_at(s, h, s->ch->i0)) * s->bb;
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

// S [r, n·blk] = softmax(Q_i·Kᵀ/√hd) over row block i's present keys (kg: scratch for the keys)
static void row_probs(const Shape *s, float *S, int n, const float *qkv, int b, int h, int i, float *kg) {
    int r = rows_of(s, i);
    long w = (long)n * s->blk;
    gather_row(s, kg, qkv, s->D, b, h, i);
    bgemm(0, 1, r, (int)w, s->hd, s->scale, rows_at(s, qkv, s->ld, b, h, i), s->ld, kg, s->hd, 0.0f, S, (int)w);
    strip_softmax(S, w, r, s->blk);
}

// scratch: keys, values [max_row·blk, hd] each, then (recompute) the strip [blk, max_row·blk]
static void row_forward(const Shape *s, float *out, float *att, const float *qkv, int b, int h, int i, float *scr) {
    int n;
    float *kg = scr, *vg = scr + (long)s->L->max_row * s->blk * s->hd, *S = strip_at(s, att, b, h, i, &n);
    if (s->L->recompute) S = vg + (long)s->L->max_row * s->blk * s->hd;
    row_probs(s, S, n, qkv, b, h, i, kg);
    gather_row(s, vg, qkv, 2 * s->D, b, h, i);
    bgemm(0, 0, rows_of(s, i), s->hd, n * s->blk, 1.0f, S, n * s->blk, vg, s->hd, 0.0f,
          (float *)rows_at(s, out, s->D, b, h, i), s->D);
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
// In a recompute chunk only the chunk's query blocks count, and their sum is added to dst.
static void column_pass(const Shape *s, float *dst, float *att, const float *src, long src_ld, int b, int h, int j,
                        float *scr) {
    long e0 = col_at(s, h, j), e1 = col_at(s, h, j + 1), m = 0;
    int lo = s->ch ? s->ch->i0 : 0, hi = s->ch ? s->ch->i1 : s->nbq;
    for (long top = e1; e0 < top;) {   // the first entry at query block lo or later (sorted)
        long mid = (e0 + top) / 2;
        if (s->L->crow[mid] < lo) e0 = mid + 1; else top = mid;
    }
    if (s->ch && (e0 == e1 || s->L->crow[e0] >= hi)) return;   // nothing of this chunk to add
    float *pg = scr, *xg = scr + (long)s->L->max_col * s->bb;
    for (long e = e0; e < e1 && s->L->crow[e] < hi; e++, m++) {
        int i = s->L->crow[e], n, r = rows_of(s, i);
        float *S = strip_at(s, att, b, h, i, &n);
        long k = s->L->cent[e] - row_at(s, h, i);   // the block's place in its strip
        copy_block(pg + m * s->bb, S + k * s->blk, (long)n * s->blk, r, s->blk, s->blk);
        copy_block(xg + m * s->blk * s->hd, rows_at(s, src, src_ld, b, h, i), src_ld, r, s->hd, s->blk);
    }
    bgemm(1, 0, rows_of(s, j), s->hd, (int)(m * s->blk), 1.0f, pg, s->blk, xg, s->hd, s->ch ? 1.0f : 0.0f,
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

// The three passes over query blocks [i0, i1) (all of them when the strips are stored); key
// blocks j < i1 are the only ones those rows can reach.
static void backward_passes(const Shape *s, float *dqkv, const float *dout, float *att, const float *qkv, int i0,
                            int i1, float *scratch) {
    int H = s->H, nq = i1 - i0;
    long n = (long)s->B * H * nq, nc = (long)s->B * H * i1, tmp = sparse_attention_scratch_floats(s->L, s->hd);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < nc; x++)   // dV from P
        column_pass(s, dqkv + 2 * s->D, att, dout, s->D, (int)(x / ((long)H * i1)), (int)(x / i1 % H), (int)(x % i1),
                    scratch + omp_get_thread_num() * tmp);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < n; x++)   // P → dS, dQ
        row_backward(s, dqkv, dout, att, qkv, (int)(x / ((long)H * nq)), (int)(x / nq % H), i0 + (int)(x % nq),
                     scratch + omp_get_thread_num() * tmp);
    #pragma omp parallel for schedule(dynamic)
    for (long x = 0; x < nc; x++)   // dK from dS
        column_pass(s, dqkv + s->D, att, qkv, s->ld, (int)(x / ((long)H * i1)), (int)(x / i1 % H), (int)(x % i1),
                    scratch + omp_get_thread_num() * tmp);
}

// floats of query block i's strips over all sequences and heads
static long row_floats(const Shape *s, int i) {
    long n = 0;
    for (int h = 0; h < s->H; h++) n += row_at(s, h, i + 1) - row_at(s, h, i);
    return n * s->B * s->bb;
}

long sparse_attention_recompute_floats(const SparseLayout *L, int B) {
    if (!L->recompute) return 0;
    long most = 0, all = 0;
    for (int h = 0; h < L->H; h++)
        for (int i = 0; i < L->nb; i++) {
            long f = L->row[(long)h * (L->nb + 1) + i + 1] - L->row[(long)h * (L->nb + 1) + i];
            most = f > most ? f : most;
            all += f;
        }
    most *= (long)B * L->H * L->block * L->block;   // a bound on one query block's strips
    all *= (long)B * L->block * L->block;
    long cap = most > sparse_attention_chunk_floats ? most : sparse_attention_chunk_floats;
    return cap < all ? cap : all;
}

// recompute: chunks of query blocks of about sparse_attention_chunk_floats strips each (at least a
// row), in the scratch after the threads' parts; per chunk the strips are recomputed, then the
// passes run on them. dK and dV start at zero and gather every chunk's share.
static void backward_chunked(Shape *s, float *dqkv, const float *dout, const float *qkv, float *scratch) {
    for (long t = 0; t < (long)s->B * s->T; t++) memset(dqkv + t * s->ld + s->D, 0, sizeof(float) * 2 * s->D);
    long tmp = sparse_attention_scratch_floats(s->L, s->hd), cap = sparse_attention_recompute_floats(s->L, s->B);
    long off[s->B * s->H];
    Chunk ch = {0, 0, off, scratch + omp_get_max_threads() * tmp};
    s->ch = &ch;
    while (ch.i0 < s->nbq) {
        long fl = 0;
        for (ch.i1 = ch.i0; ch.i1 < s->nbq; ch.i1++) {   // cap holds any one row, so each chunk takes one
            long f = row_floats(s, ch.i1);
            if (fl + f > cap) break;
            fl += f;
        }
        for (long bh = 0, at = 0; bh < (long)s->B * s->H; bh++) {
            int h = (int)(bh % s->H);
            ch.off[bh] = at;
            at += (row_at(s, h, ch.i1) - row_at(s, h, ch.i0)) * s->bb;
        }
        int nq = ch.i1 - ch.i0;
        long n = (long)s->B * s->H * nq;
        #pragma omp parallel for schedule(dynamic)
        for (long x = 0; x < n; x++) {   // the chunk's probabilities, as the forward made them
            int b = (int)(x / ((long)s->H * nq)), h = (int)(x / nq % s->H), i = ch.i0 + (int)(x % nq), k;
            float *S = strip_at(s, NULL, b, h, i, &k);
            row_probs(s, S, k, qkv, b, h, i, scratch + omp_get_thread_num() * tmp);
        }
        backward_passes(s, dqkv, dout, NULL, qkv, ch.i0, ch.i1, scratch);
        ch.i0 = ch.i1;
    }
    s->ch = NULL;
}

void sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                               int B, int T, int H, int hd, float *scratch) {
    ON_GPU(cu_sparse_attention_backward(dqkv, dout, att, qkv, L, B, T, H, hd));
    Shape s = shape_of(L, B, T, H, hd);
    if (L->recompute) backward_chunked(&s, dqkv, dout, qkv, scratch);
    else backward_passes(&s, dqkv, dout, att, qkv, 0, s.nbq, scratch);
}
