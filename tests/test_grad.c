// test_grad.c — finite-difference checks of every op's backward and of the whole model
// (dense; MoE top-1 and top-2 with drops; dropless; aux and z losses; the routing family's routers and
// expert kinds: swiglu and shared experts (gated too), the llama block with Mixtral's router and experts (and Qwen2-MoE's), noisy_topk with its losses, switch jitter, gshard,
// RTS, expert choice, group-limited routing). Central differences
// in fp32 on functions whose gradients are O(0.1): a wrong factor or a missing term shows
// as a relative error near 1, while the differences themselves agree to ~1e-3.
#include "core/alloc.h"
#include "moe/dispatcher.h"
#include "model/model.h"
#include "nn/ops.h"
#include "core/rng.h"
#include "moe/router.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int failures = 0, passes = 0;
static uint64_t counter = 1;
static float randn(void) { return rng_normal(42, 7, counter++); }
static void fill(float *x, long n, float s) { for (long i = 0; i < n; i++) x[i] = s * randn(); }
static float *buf(long n) { return ted_alloc(sizeof(float) * n, MEM_TEMP); }
static double dot(const float *a, const float *b, long n) { double s = 0; for (long i = 0; i < n; i++) s += (double)a[i] * b[i]; return s; }

// Compares analytic gradient g with the central difference of f over (up to 40) coordinates of x.
typedef double (*Fn)(void *ctx);
static void check(const char *name, Fn f, void *ctx, float *x, const float *g, long n, float h, double tol) {
    double worst = 0;
    int checked = 0;
    long step = n > 40 ? n / 40 : 1;
    for (long i = 0; i < n; i += step, checked++) {
        float keep = x[i];
        x[i] = keep + h; double fp = f(ctx);
        x[i] = keep - h; double fm = f(ctx);
        x[i] = keep;
        double fd = (fp - fm) / (2.0 * h), an = g[i];
        double err = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 1e-2);
        if (err > worst) worst = err;
    }
    int ok = worst < tol;
    printf("%-44s %3d coords  max rel err %.2e  %s\n", name, checked, worst, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}

// ---------------------------------------------------------------------------------------
// ops: f = Σ out ⊙ R for a fixed random R

enum { N_ = 12, C_ = 16, OC_ = 10, B_ = 2, T_ = 6, H_ = 2, HD_ = 4, V_ = 9 };
typedef struct { float *inp, *w, *b, *out, *R, *mean, *rstd; long N; int C, OC; } OpCtx;

static double f_layernorm(void *p) {
    OpCtx *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 0);
    return dot(c->out, c->R, c->N * c->C);
}
static double f_matmul(void *p) {
    OpCtx *c = p;
    matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC, 0);
    return dot(c->out, c->R, c->N * c->OC);
}
static double f_gelu(void *p) { OpCtx *c = p; gelu_forward(c->out, c->inp, c->N); return dot(c->out, c->R, c->N); }
static double f_attention(void *p) {
    OpCtx *c = p;   // inp = qkv [B·T, 3·H·hd], w = att scratch
    attention_forward(c->out, c->w, c->inp, B_, T_, H_, HD_);
    return dot(c->out, c->R, (long)B_ * T_ * H_ * HD_);
}
// Long enough for the causal blocks (64 rows each, the last partial): T 150 = 64 + 64 + 22.
enum { LT_ = 150, LH_ = 2, LHD_ = 8 };
static double f_attention_long(void *p) {
    OpCtx *c = p;
    attention_forward(c->out, c->w, c->inp, 1, LT_, LH_, LHD_);
    return dot(c->out, c->R, (long)LT_ * LH_ * LHD_);
}
static void check_attention_long(void) {
    uint64_t keep = counter;   // its own draws: the checks after it see the numbers they always saw
    counter = 1u << 30;
    long nq = (long)LT_ * 3 * LH_ * LHD_, no = (long)LT_ * LH_ * LHD_;
    float *qkv = buf(nq), *att = buf((long)LH_ * LT_ * LT_), *gq = buf(nq), *out = buf(no), *R = buf(no);
    float *scratch = buf(omp_get_max_threads() * attention_scratch_floats(LT_));
    fill(qkv, nq, 1); fill(R, no, 1);
    OpCtx a = {qkv, att, NULL, out, R, NULL, NULL, 0, 0, 0};
    f_attention_long(&a);
    attention_backward(gq, R, att, qkv, out, 1, LT_, LH_, LHD_, scratch);
    check("attention d(qkv), T 150 (causal blocks)", f_attention_long, &a, qkv, gq, nq, 1e-2f, 1e-2);
    counter = keep;
}

// Attention at T 600 (a superblock of 512 rows, then 64 + 24) against the formula in double: out,
// and dqkv by the plain softmax backward. att, out and dqkv start as garbage: all must be written.
enum { NT_ = 600, NH_ = 2, NHD_ = 8, NB_ = 2 };
static void naive_attention(double *o, double *dq, const float *qkv, const float *dO, int b, int h) {
    int D = NH_ * NHD_, ld = 3 * D;
    double sc = 1.0 / sqrt((double)NHD_), p[NT_], dp[NT_];
    const float *Q = qkv + (long)b * NT_ * ld + h * NHD_, *K = Q + D, *V = Q + 2 * D;
    for (int t = 0; t < NT_; t++) {
        double mx = -1e300, s = 0, dl = 0;
        for (int u = 0; u <= t; u++) {
            p[u] = 0;
            for (int c = 0; c < NHD_; c++) p[u] += (double)Q[(long)t * ld + c] * K[(long)u * ld + c] * sc;
            mx = fmax(mx, p[u]);
        }
        for (int u = 0; u <= t; u++) { p[u] = exp(p[u] - mx); s += p[u]; }
        const float *g = dO + ((long)b * NT_ + t) * D + h * NHD_;
        for (int u = 0; u <= t; u++) {
            p[u] /= s; dp[u] = 0;
            for (int c = 0; c < NHD_; c++) {
                o[(long)t * NHD_ + c] += p[u] * V[(long)u * ld + c];
                dp[u] += (double)g[c] * V[(long)u * ld + c];
                dq[((long)u * 3 + 2) * NHD_ + c] += p[u] * g[c];   // dV
            }
            dl += p[u] * dp[u];
        }
        for (int u = 0; u <= t; u++)
            for (int c = 0; c < NHD_; c++) {
                double ds = p[u] * (dp[u] - dl) * sc;
                dq[(long)t * 3 * NHD_ + c] += ds * K[(long)u * ld + c];
                dq[((long)u * 3 + 1) * NHD_ + c] += ds * Q[(long)t * ld + c];
            }
    }
}
static double rel_err(const float *x, long ldx, const double *ref, int rows, int w) {
    double e = 0, m = 1e-30;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < w; c++) {
            e = fmax(e, fabs(x[(long)r * ldx + c] - ref[(long)r * w + c]));
            m = fmax(m, fabs(ref[(long)r * w + c]));
        }
    return e / m;
}
static void check_attention_naive(void) {
    uint64_t keep = counter;   // its own draws, as check_attention_long
    counter = 3u << 30;
    int D = NH_ * NHD_;
    long nq = (long)NB_ * NT_ * 3 * D, no = (long)NB_ * NT_ * D;
    float *qkv = buf(nq), *dO = buf(no), *out = buf(no), *dqkv = buf(nq), *att = buf((long)NB_ * NH_ * NT_ * NT_);
    float *scratch = buf(omp_get_max_threads() * attention_scratch_floats(NT_));
    double *o = ted_alloc(sizeof(double) * NT_ * NHD_, MEM_TEMP), *dq = ted_alloc(sizeof(double) * NT_ * 3 * NHD_, MEM_TEMP);
    fill(qkv, nq, 1.5f); fill(dO, no, 1);
    for (long i = 0; i < (long)NB_ * NH_ * NT_ * NT_; i++) att[i] = 1e30f;
    for (long i = 0; i < nq; i++) dqkv[i] = 1e30f;
    for (long i = 0; i < no; i++) out[i] = 1e30f;
    attention_forward(out, att, qkv, NB_, NT_, NH_, NHD_);
    attention_backward(dqkv, dO, att, qkv, out, NB_, NT_, NH_, NHD_, scratch);
    double eo = 0, eq = 0;
    for (int b = 0; b < NB_; b++)
        for (int h = 0; h < NH_; h++) {
            memset(o, 0, sizeof(double) * NT_ * NHD_); memset(dq, 0, sizeof(double) * NT_ * 3 * NHD_);
            naive_attention(o, dq, qkv, dO, b, h);
            eo = fmax(eo, rel_err(out + (long)b * NT_ * D + h * NHD_, D, o, NT_, NHD_));
            for (int part = 0; part < 3; part++) {   // q, k, v columns of this head against the reference's
                double *r = ted_alloc(sizeof(double) * NT_ * NHD_, MEM_TEMP);
                for (int t = 0; t < NT_; t++) memcpy(r + (long)t * NHD_, dq + ((long)t * 3 + part) * NHD_, sizeof(double) * NHD_);
                eq = fmax(eq, rel_err(dqkv + (long)b * NT_ * 3 * D + part * D + h * NHD_, 3 * D, r, NT_, NHD_));
                ted_free(r);
            }
        }
    int ok = eo < 1e-5 && eq < 1e-5;
    printf("%-44s out %.2e  dqkv %.2e  %s\n", "attention T 600 against the formula", eo, eq, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
    ted_free(o); ted_free(dq);
    counter = keep;
}

// The fused MLP half (matmul_bias_gelu_*): f = Σ GELU(inp·w + b) ⊙ R
typedef struct { float *inp, *w, *b, *h, *hg, *R; } MlpCtx;
static double f_mlp(void *p) {
    MlpCtx *c = p;
    matmul_bias_gelu_forward(c->h, c->hg, c->inp, c->w, c->b, N_, C_, OC_);
    return dot(c->hg, c->R, N_ * OC_);
}
static void report(const char *name, double worst, double tol) {
    int ok = worst <= tol;
    printf("%-44s max err %.2e  %s\n", name, worst, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}
static void check_mlp_fused(void) {
    uint64_t keep = counter;   // its own draws: the checks after it see the numbers they always saw
    counter = 1u << 31;
    MlpCtx c = {buf(N_ * C_), buf(C_ * OC_), buf(OC_), buf(N_ * OC_), buf(N_ * OC_), buf(N_ * OC_)};
    float *gi = buf(N_ * C_), *gw = buf(C_ * OC_), *gb = buf(OC_), *dh = buf(N_ * OC_), *g2 = buf(N_ * OC_);
    float *gb1 = buf(OC_);
    fill(c.inp, N_ * C_, 1); fill(c.w, C_ * OC_, 0.5f); fill(c.b, OC_, 1); fill(c.R, N_ * OC_, 1);
    f_mlp(&c);
    memset(gw, 0, sizeof(float) * C_ * OC_); memset(gb, 0, sizeof(float) * OC_);
    matmul_bias_gelu_backward(gi, gw, gb, dh, c.R, c.h, c.inp, c.w, N_, C_, OC_);
    check("matmul+bias+gelu d(input)", f_mlp, &c, c.inp, gi, N_ * C_, 1e-2f, 1e-2);
    check("matmul+bias+gelu d(weight)", f_mlp, &c, c.w, gw, C_ * OC_, 1e-2f, 1e-2);
    check("matmul+bias+gelu d(bias)", f_mlp, &c, c.b, gb, OC_, 1e-2f, 1e-2);
    f_mlp(&c);   // the checks left h and hg at a perturbed point
    // h is the GEMM plus bias, hg and dh the tanh formula (in double) of h
    double wh = 0, wg = 0, wd = 0;
    for (int i = 0; i < N_; i++)
        for (int o = 0; o < OC_; o++) {
            double z = c.b[o], x = c.h[i * OC_ + o];
            for (int k = 0; k < C_; k++) z += (double)c.inp[i * C_ + k] * c.w[k * OC_ + o];
            double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
            double g = 0.5 * x * (1 + th);
            double dg = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
            wh = fmax(wh, fabs(x - z));
            wg = fmax(wg, fabs(c.hg[i * OC_ + o] - g) / fmax(fabs(g), 1e-3));
            wd = fmax(wd, fabs(dh[i * OC_ + o] - c.R[i * OC_ + o] * dg) / fmax(fabs(c.R[i * OC_ + o] * dg), 1e-3));
        }
    report("matmul+bias+gelu h = inp·w + b", wh, 1e-5);
    report("matmul+bias+gelu GELU(h) vs tanh form (rel)", wg, 1e-5);
    report("matmul+bias+gelu dh vs tanh form (rel)", wd, 1e-5);
    // in place (dh = dhg): the same bits; on one thread: the same up to the vector/scalar exp's last bit
    memcpy(g2, c.R, sizeof(float) * N_ * OC_);
    memset(gb1, 0, sizeof(float) * OC_);
    matmul_bias_gelu_backward(NULL, NULL, gb1, g2, g2, c.h, c.inp, c.w, N_, C_, OC_);
    int same = memcmp(g2, dh, sizeof(float) * N_ * OC_) == 0 && memcmp(gb1, gb, sizeof(float) * OC_) == 0;
    report("matmul+bias+gelu in place = apart (bits)", same ? 0 : 1, 0);
    memcpy(g2, c.R, sizeof(float) * N_ * OC_);
    memset(gb1, 0, sizeof(float) * OC_);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    matmul_bias_gelu_backward(NULL, NULL, gb1, g2, g2, c.h, c.inp, c.w, N_, C_, OC_);
    omp_set_num_threads(nt);
    double w1 = 0;
    for (int i = 0; i < N_ * OC_; i++) w1 = fmax(w1, fabs(g2[i] - dh[i]) / fmax(fabs(dh[i]), 1e-3));
    for (int o = 0; o < OC_; o++) w1 = fmax(w1, fabs(gb1[o] - gb[o]) / fmax(fabs(gb[o]), 1e-3));
    report("matmul+bias+gelu 1 thread against 2 (rel)", w1, 1e-6);
    // the tails: x³ overflowing gives exactly 0 (negative) and x (positive), slopes 0 and 1
    float x[4] = {-1e4f, -60, 60, 1e4f}, y[4], one[4] = {1, 1, 1, 1}, s[4];
    gelu_forward(y, x, 4);
    gelu_backward(s, x, one, 4);
    int tails = y[0] == 0 && y[1] == 0 && y[2] == 60 && y[3] == 1e4f && s[0] == 0 && s[1] == 0 && s[2] == 1 && s[3] == 1;
    report("gelu tails (|x| 60, 1e4): 0 / x, slopes 0 / 1", tails ? 0 : 1, 0);
    counter = keep;
}

static int targets[N_];
static double f_ce(void *p) {
    OpCtx *c = p;
    memcpy(c->out, c->inp, sizeof(float) * c->N * V_);
    float mx[N_], tl[N_], sum[N_];   // one shard of V_ columns, the last 2 padding
    crossentropy_max(mx, tl, c->out, targets, c->N, 0, V_, V_ - 2);
    crossentropy_exp(sum, c->out, mx, c->N, 0, V_, V_ - 2);
    crossentropy_finish(c->mean, c->out, mx, sum, tl, c->N, V_);
    double s = 0;
    for (long i = 0; i < c->N; i++) s += c->R[i] * c->mean[i];
    return s;
}

static void test_ops(void) {
    OpCtx c = {buf(N_ * C_), buf(C_ * OC_), buf(OC_ + C_), buf(N_ * 64), buf(N_ * 64), buf(N_), buf(N_), N_, C_, OC_};
    float *gi = buf(N_ * 64), *gw = buf(C_ * OC_), *gb = buf(OC_ + C_);
    // layernorm
    fill(c.inp, N_ * C_, 1); fill(c.w, C_, 1); fill(c.b, C_, 1); fill(c.R, N_ * C_, 1);
    f_layernorm(&c);
    memset(gi, 0, sizeof(float) * N_ * C_); memset(gw, 0, sizeof(float) * C_); memset(gb, 0, sizeof(float) * C_);
    layernorm_backward(gi, gw, gb, c.R, c.inp, c.w, c.mean, c.rstd, N_, C_, 0);
    check("layernorm d(input)", f_layernorm, &c, c.inp, gi, N_ * C_, 1e-2f, 1e-2);
    check("layernorm d(weight)", f_layernorm, &c, c.w, gw, C_, 1e-2f, 1e-2);
    check("layernorm d(bias)", f_layernorm, &c, c.b, gb, C_, 1e-2f, 1e-2);
    // matmul with bias
    fill(c.inp, N_ * C_, 1); fill(c.w, C_ * OC_, 1); fill(c.b, OC_, 1); fill(c.R, N_ * OC_, 1);
    memset(gw, 0, sizeof(float) * C_ * OC_); memset(gb, 0, sizeof(float) * OC_);
    matmul_backward(gi, gw, gb, c.R, c.inp, c.w, N_, C_, OC_, 0);
    check("matmul d(input)", f_matmul, &c, c.inp, gi, N_ * C_, 1e-2f, 1e-2);
    check("matmul d(weight)", f_matmul, &c, c.w, gw, C_ * OC_, 1e-2f, 1e-2);
    check("matmul d(bias)", f_matmul, &c, c.b, gb, OC_, 1e-2f, 1e-2);
    // gelu
    fill(c.inp, N_ * C_, 2); fill(c.R, N_ * C_, 1);
    c.N = N_ * C_;
    gelu_backward(gi, c.inp, c.R, c.N);
    check("gelu", f_gelu, &c, c.inp, gi, c.N, 1e-2f, 1e-2);
    check_mlp_fused();
    // attention (causal, 2 heads)
    long nq = (long)B_ * T_ * 3 * H_ * HD_;
    float *qkv = buf(nq), *att = buf((long)B_ * H_ * T_ * T_), *gq = buf(nq), *scratch = buf(omp_get_max_threads() * attention_scratch_floats(T_));
    fill(qkv, nq, 1); fill(c.R, (long)B_ * T_ * H_ * HD_, 1);
    OpCtx a = {qkv, att, NULL, c.out, c.R, NULL, NULL, 0, 0, 0};
    f_attention(&a);
    attention_backward(gq, c.R, att, qkv, c.out, B_, T_, H_, HD_, scratch);
    check("attention d(qkv)", f_attention, &a, qkv, gq, nq, 1e-2f, 1e-2);
    check_attention_long();
    check_attention_naive();
    // cross-entropy over logits with 2 padded columns: d(sum R_i·loss_i)
    float *logits = buf(N_ * V_);
    fill(logits, N_ * V_, 2); fill(c.R, N_, 1);
    for (int i = 0; i < N_; i++) targets[i] = i % (V_ - 2);
    OpCtx e = {logits, NULL, NULL, c.out, c.R, c.mean, NULL, N_, 0, 0};
    f_ce(&e);
    // backward with per-row scale: apply the op's scale 1 then weight the rows by R
    crossentropy_backward(c.out, targets, N_, 0, V_, 1.0f);
    for (int i = 0; i < N_; i++) for (int v = 0; v < V_; v++) c.out[i * V_ + v] *= c.R[i];
    float *gl = buf(N_ * V_);
    memcpy(gl, c.out, sizeof(float) * N_ * V_);
    check("cross-entropy d(logits)", f_ce, &e, logits, gl, (long)N_ * (V_ - 2), 1e-2f, 1e-2);
    {   // the same losses from two vocabulary shards of 5 and 4 columns (max / sum reductions by hand)
        float one[N_], sh[2][N_ * 5], mx[2][N_], tl[2][N_], sum[2][N_], loss[N_];
        f_ce(&e);
        memcpy(one, c.mean, sizeof one);
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < N_; i++)
                for (int v = 0; v < 5; v++) sh[k][i * 5 + v] = k * 5 + v < V_ ? logits[i * V_ + k * 5 + v] : 0;
        for (int k = 0; k < 2; k++) crossentropy_max(mx[k], tl[k], sh[k], targets, N_, k * 5, 5, V_ - 2);
        for (int i = 0; i < N_; i++) { mx[0][i] = mx[1][i] = fmaxf(mx[0][i], mx[1][i]); tl[0][i] = tl[1][i] = tl[0][i] + tl[1][i]; }
        for (int k = 0; k < 2; k++) crossentropy_exp(sum[k], sh[k], mx[k], N_, k * 5, 5, V_ - 2);
        for (int i = 0; i < N_; i++) sum[0][i] = sum[1][i] = sum[0][i] + sum[1][i];
        crossentropy_finish(loss, sh[0], mx[0], sum[0], tl[0], N_, 5);
        double worst = 0;
        for (int i = 0; i < N_; i++) worst = fmax(worst, fabs(loss[i] - one[i]));
        printf("%-44s %3d rows    max abs err %.2e  %s\n", "cross-entropy over 2 vocabulary shards", N_, worst, worst < 1e-5 ? "ok" : "FAIL");
        failures += worst >= 1e-5; passes += worst < 1e-5;
    }
    {   // a logit's exp is the same bits whatever shard holds it and wherever the shard ends: a row of
        // V 37 in one shard, and in three of 13 columns (the last 11 real + 2 padding), as tp 3 cuts it
        enum { VW = 37, SW = 13, RW = 3 };
        float one[RW * VW], sh[RW * SW], mx[RW], sum[RW];
        int same = 1;
        uint64_t keep_counter = counter;   // its own draws: the checks after it see the numbers they always saw
        counter = 5u << 28;
        fill(one, RW * VW, 4);
        counter = keep_counter;
        for (int i = 0; i < RW; i++) { mx[i] = -INFINITY; for (int v = 0; v < VW; v++) mx[i] = fmaxf(mx[i], one[i * VW + v]); }
        float keep[RW * VW];
        memcpy(keep, one, sizeof keep);
        crossentropy_exp(sum, one, mx, RW, 0, VW, VW);
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < RW; i++)
                for (int v = 0; v < SW; v++) sh[i * SW + v] = k * SW + v < VW ? keep[i * VW + k * SW + v] : 0;
            crossentropy_exp(sum, sh, mx, RW, k * SW, SW, VW);
            for (int i = 0; i < RW; i++)
                for (int v = 0; v < SW && k * SW + v < VW; v++) same &= !memcmp(&sh[i * SW + v], &one[i * VW + k * SW + v], 4);
        }
        printf("%-44s %s\n", "cross-entropy exp: same bits in 3 shards", same ? "ok" : "FAIL");
        failures += !same; passes += same;
    }
    // encoder: linear, the gradient is a gather; check through f = Σ out ⊙ R
    {
        int d = 8, V = 5, tok[B_ * T_];
        float *wte = buf(V * d), *wpe = buf(T_ * d), *out = buf(B_ * T_ * d), *R = buf(B_ * T_ * d);
        float *gte = buf(V * d), *gpe = buf(T_ * d);
        for (int i = 0; i < B_ * T_; i++) tok[i] = (i * 3) % V;
        fill(wte, V * d, 1); fill(wpe, T_ * d, 1); fill(R, B_ * T_ * d, 1);
        encoder_backward(gte, gpe, R, tok, 0, V, B_, T_, d);
        double base = 0;
        encoder_forward(out, tok, wte, 0, V, wpe, B_, T_, d);
        base = dot(out, R, B_ * T_ * d);
        double worst = 0;
        for (int i = 0; i < V * d; i++) {
            wte[i] += 1; encoder_forward(out, tok, wte, 0, V, wpe, B_, T_, d); wte[i] -= 1;
            worst = fmax(worst, fabs(dot(out, R, B_ * T_ * d) - base - gte[i]));
        }
        for (int i = 0; i < T_ * d; i++) {
            wpe[i] += 1; encoder_forward(out, tok, wte, 0, V, wpe, B_, T_, d); wpe[i] -= 1;
            worst = fmax(worst, fabs(dot(out, R, B_ * T_ * d) - base - gpe[i]));
        }
        printf("%-44s %3d coords  max abs err %.2e  %s\n", "encoder d(wte), d(wpe) (exact, linear)", V * d + T_ * d,
               worst, worst < 1e-4 ? "ok" : "FAIL");
        failures += worst >= 1e-4; passes += worst < 1e-4;
    }
}

// ---------------------------------------------------------------------------------------
// router + dispatcher/combine: f = Σ_t R_t · Σ_j g_tj·y_row + aux·Σ_groups l_aux + z·Σ lse²,
// as a function of the router logits, with the routing held fixed

enum { RN = 16, RE = 4, RK = 2, RD = 3 };
typedef struct {
    float *logits, *probs, *lse, *gate, *fcount, *y, *out, *R;
    int *choice, *slot, *kept, *row;
    long *rows, *start;
    RouterCfg cfg;
    float aux, z;
    int ref_choice[RN * RK];
    int flipped;
} RCtx;

static double f_router(void *p) {
    RCtx *c = p;
    memcpy(c->probs, c->logits, sizeof(float) * RN * RE);
    RouterStats st = {0};
    router_forward(c->probs, c->lse, c->choice, c->gate, c->slot, c->fcount, c->kept, RN, &c->cfg, &st);
    if (memcmp(c->choice, c->ref_choice, sizeof c->ref_choice)) c->flipped = 1;
    dispatch_plan(c->row, c->rows, c->start, c->choice, c->slot, c->kept, RN, RK, &c->cfg, 1, 1);
    memset(c->out, 0, sizeof(float) * RN * RD);
    combine_forward(c->out, c->y, c->gate, c->row, RN, RK, RD, 0);
    return dot(c->out, c->R, RN * RD) + c->aux * st.aux_sum + c->z * st.z_sum;
}

static void test_router(float cf, const char *name) {
    RCtx c = {buf(RN * RE), buf(RN * RE), buf(RN), buf(RN * RK), buf(RN * RE), buf(RN * RK * RD * 4), buf(RN * RD),
              buf(RN * RD), NULL, NULL, NULL, NULL, NULL, NULL, RCFG(RE, RK, cf, 1, 8), 0.3f, 0.05f, {0}, 0};
    c.choice = ted_alloc(sizeof(int) * RN * RK, MEM_TEMP); c.slot = ted_alloc(sizeof(int) * RN * RK, MEM_TEMP);
    c.kept = ted_alloc(sizeof(int) * RN * RE, MEM_TEMP); c.row = ted_alloc(sizeof(int) * RN * RK, MEM_TEMP);
    c.rows = ted_alloc(sizeof(long) * RE, MEM_TEMP); c.start = ted_alloc(sizeof(long) * RN * RE, MEM_TEMP);
    // logits 0.4 apart within a token (a per-token permutation), so that no perturbation flips the top-k
    for (int t = 0; t < RN; t++)
        for (int e = 0; e < RE; e++) c.logits[t * RE + e] = 0.4f * (float)((e + t * 3 + (t / RE)) % RE) + 0.05f * randn();
    fill(c.y, RN * RK * RD, 1); fill(c.R, RN * RD, 1);
    f_router(&c);
    memcpy(c.ref_choice, c.choice, sizeof c.ref_choice);
    c.flipped = 0;
    long dropped = 0;
    for (int i = 0; i < RN * RK; i++) dropped += c.slot[i] < 0;
    // analytic: dgate from combine_backward, then router_backward
    float *dy = buf(RN * RK * RD * 4), *dgate = buf(RN * RK), *dl = buf(RN * RE);
    combine_backward(dy, dgate, c.R, c.y, c.gate, c.row, RN, RK, RD, 0, 0);
    router_backward(dl, dgate, c.probs, c.lse, c.choice, c.fcount, RN, &c.cfg, c.aux, c.z);
    char label[96];
    snprintf(label, sizeof label, "router+combine d(logits), %s (%ld drops)", name, dropped);
    check(label, f_router, &c, c.logits, dl, RN * RE, 1e-3f, 1e-2);
    if (c.flipped) printf("  (note: a perturbation changed the routing; h is too large)\n");
    failures += c.flipped;
    if (cf > 0 && dropped == 0) { printf("  FAIL: expected drops with capacity factor %.2f\n", cf); failures++; }
}

// ---------------------------------------------------------------------------------------
// whole model: loss = lm/ntok + aux_coef·Σ l_aux/ngroups + z_coef·Σ lse²/ntok

typedef struct { Model *M; int *tok, *tgt; int B, T; double ngroups; int nmoe; } MCtx;

static double model_loss(Model *M, const int *tok, const int *tgt, int B, int T, double ngroups) {
    RouterStats before = M->rstats;
    double lm = model_forward(M, tok, tgt, B, T), ntok = (double)B * T;
    double aux = M->rstats.aux_sum - before.aux_sum, z = M->rstats.z_sum - before.z_sum;
    double cv = M->rstats.cv_sum - before.cv_sum;   // noisy_topk: already weighted per group
    return lm / ntok + M->m.aux_coef * aux / ngroups + M->m.z_coef * z / ntok + cv / ngroups;
}

static int *routing_snapshot(Model *M, long N) {
    int *s = ted_alloc(sizeof(int) * 2 * N * M->k * M->L + 1, MEM_TEMP), n = 0;
    for (int l = 0; l < M->L; l++) {
        if (!M->bp[l].moe) continue;
        memcpy(s + n, M->ba[l].moe.choice, sizeof(int) * N * M->k); n += (int)(N * M->k);
        memcpy(s + n, M->ba[l].moe.slot, sizeof(int) * N * M->k); n += (int)(N * M->k);
    }
    return s;
}

// tweak (may be NULL) sets the routing family's options; train turns on the training-time randomness
// (noise, jitter, random routing, RTS), which depends only on coordinates, so it is the same
// function under every perturbation.
static void test_model_opts(const char *name, int E, int k, int moe_every, float cf, int group_size, float aux, float z,
                            void (*tweak)(ModelConfig *), int train) {
    Config c;
    config_defaults(&c);
    ModelConfig *m = &c.model;
    m->vocab_size = 11; m->n_positions = 8; m->n_embd = 8; m->n_layer = 2; m->n_head = 2; m->n_inner = 12;
    m->num_experts = E; m->top_k = k; m->moe_every = moe_every; m->capacity_factor = cf; m->min_capacity = 1;
    m->group_size = group_size; m->aux_coef = aux; m->z_coef = z;
    if (tweak) tweak(m);
    int B = 4, T = 6;
    Topology topo;
    topo_init(&topo, 1, 1, 1);
    Model M;
    model_build(&M, &c, &topo, B, T);
    if (train) { M.rng_step = 5; M.seq0 = 8; }
    // larger weights than the 0.02 init, so that gradients are O(0.1) and fp32 differences resolve them
    for (int i = 0; i < M.reg.n; i++) {
        Param *p = &M.reg.p[i];
        float s = p->ndim == 2 ? 0.5f : 0.2f;
        for (long j = 0; j < p->numel; j++) p->w[j] = ((strstr(p->name, "ln_") || strstr(p->name, "norm")) && strstr(p->name, "weight") ? 1.0f : 0.0f) + s * randn();
    }
    int tok[24], tgt[24];
    for (int i = 0; i < B * T; i++) { tok[i] = (i * 7 + 3) % 11; tgt[i] = (i * 5 + 1) % 11; }
    double ntok = B * T, ngroups = (double)B / group_size;
    model_zero_grad(&M);
    memset(&M.rstats, 0, sizeof M.rstats);
    model_loss(&M, tok, tgt, B, T, ngroups);
    long dropped = M.rstats.dropped;
    int *ref = routing_snapshot(&M, B * T);
    model_backward(&M, (float)(1.0 / ntok), (float)(aux / ngroups), (float)(z / ntok));
    // every tensor: a few coordinates each
    double worst = 0;
    int coords = 0, skipped = 0;
    const char *worst_name = "";
    for (int i = 0; i < M.reg.n; i++) {
        Param *p = &M.reg.p[i];
        for (int r = 0; r < 3; r++) {
            long j = (long)(rng_at(9, (uint64_t)i, (uint64_t)r) % (uint64_t)p->numel);
            float keep = p->w[j], h = 2e-3f;
            p->w[j] = keep + h; double fp = model_loss(&M, tok, tgt, B, T, ngroups);
            int *sp = routing_snapshot(&M, B * T);
            p->w[j] = keep - h; double fm = model_loss(&M, tok, tgt, B, T, ngroups);
            int *sm = routing_snapshot(&M, B * T);
            p->w[j] = keep;
            size_t bytes = sizeof(int) * 2 * (size_t)B * T * M.k * M.L;
            int flip = memcmp(sp, ref, bytes) || memcmp(sm, ref, bytes);
            ted_free(sp); ted_free(sm);
            if (flip) { skipped++; continue; }    // a routing decision changed: not differentiable here
            double fd = (fp - fm) / (2.0 * h), an = p->g[j];
            double err = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 2e-2);
            if (err > worst) { worst = err; worst_name = p->name; }
            coords++;
        }
    }
    ted_free(ref);
    int ok = worst < 2e-2 && skipped * 4 < coords;
    printf("model %-38s %3d coords (%d skipped: routing flip), %ld drops; max rel err %.2e (%s)  %s\n", name, coords,
           skipped, dropped, worst, worst_name, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
    if (cf > 0 && E > 1 && dropped == 0) { printf("  FAIL: expected drops\n"); failures++; }
    model_free(&M);
}

static void test_model(const char *name, int E, int k, int moe_every, float cf, int group_size, float aux, float z) {
    test_model_opts(name, E, k, moe_every, cf, group_size, aux, z, NULL, 0);
}

static void tw_swiglu(ModelConfig *m) { m->expert_type = EXPERT_SWIGLU; m->expert_inner = 6; m->shared_experts = 2; }
static void tw_gelu_shared(ModelConfig *m) { m->expert_inner = 4; m->shared_experts = 1; }
static void tw_noisy(ModelConfig *m) { m->router = ROUTER_NOISY_TOPK; m->importance_coef = 0.3f; m->load_coef = 0.3f; }
static void tw_switch(ModelConfig *m) { m->router = ROUTER_SWITCH; m->jitter_eps = 0.2f; }
static void tw_gshard(ModelConfig *m) { m->router = ROUTER_GSHARD; m->use_rts = 1; }
static void tw_ec(ModelConfig *m) { m->router = ROUTER_EXPERT_CHOICE; }
static void tw_groups(ModelConfig *m) { m->num_groups = 2; m->topk_groups = 1; m->bias_update_rate = 0.01f; }

// llama (docs/llama.md): RMSNorm, rotary q/k, 2 query heads on 1 kv head, SwiGLU; untied head;
// Mixtral's router (top-1 renormalised: gate 1) and layout of experts
static void tw_llama(ModelConfig *m) { m->arch = ARCH_LLAMA; m->n_kv_head = 1; m->tie_word_embeddings = 0; m->rope_theta = 50; }
static void tw_llama_moe(ModelConfig *m) {
    tw_llama(m); m->expert_type = EXPERT_SWIGLU; m->router = ROUTER_MIXTRAL; m->expert_inner = 6;
}
static void tw_llama_shared(ModelConfig *m) { tw_llama_moe(m); m->tie_word_embeddings = 1; m->shared_experts = 1; }
// Qwen2-MoE's block: q/k/v biases, the shared expert scaled by sigmoid(x·w), top-k gates unrenormalised
static void tw_qwen(ModelConfig *m) {
    tw_llama_moe(m); m->qkv_bias = 1; m->shared_experts = 2; m->shared_expert_gate = 1;
    m->router = ROUTER_TOPK; m->topk_renorm = 0;
}
static void tw_gelu_gated(ModelConfig *m) { m->expert_inner = 4; m->shared_experts = 1; m->shared_expert_gate = 1; }

static void test_llama(void) {
    test_model_opts("llama dense, GQA 2:1, untied", 1, 1, 2, 1.0f, 1, 0.01f, 0, tw_llama, 0);
    test_model_opts("llama MoE mixtral top-1, cap 0.5", 4, 1, 1, 0.5f, 1, 0.1f, 0, tw_llama_moe, 0);
    test_model_opts("llama MoE mixtral top-2 dropless + shared, tied", 4, 2, 2, 0.0f, 1, 0.1f, 0.01f, tw_llama_shared, 0);
    test_model_opts("llama Qwen2-MoE: qkv bias, gated shared, top-2 plain", 4, 2, 1, 0.0f, 1, 0.1f, 0.01f, tw_qwen, 0);
}

static void test_routing_family(void) {
    test_model_opts("swiglu experts f_e 6 + 2 shared, top-2 cap 0.6", 4, 2, 1, 0.6f, 1, 0.1f, 0, tw_swiglu, 0);
    test_model_opts("gelu experts f_e 4 + 1 shared, dropless", 4, 2, 1, 0.0f, 1, 0.1f, 0.01f, tw_gelu_shared, 0);
    test_model_opts("gelu experts + 1 gated shared, dropless", 4, 2, 1, 0.0f, 1, 0.1f, 0.01f, tw_gelu_gated, 0);
    test_model_opts("noisy_topk (noise on), importance + load", 4, 2, 1, 0.6f, 1, 0.0f, 0.01f, tw_noisy, 1);
    test_model_opts("noisy_topk (eval: no noise)", 4, 1, 1, 0.0f, 2, 0.05f, 0, tw_noisy, 0);
    test_model_opts("switch, jitter 0.2 (on)", 4, 1, 1, 0.6f, 1, 0.1f, 0, tw_switch, 1);
    test_model_opts("gshard random 2nd + RTS (on)", 4, 2, 1, 0.6f, 1, 0.1f, 0.01f, tw_gshard, 1);
    test_model_opts("expert_choice, cf 1, z-loss", 4, 2, 1, 1.0f, 2, 0.1f, 0.01f, tw_ec, 0);
    test_model_opts("group-limited 2 of 4, bias balancing", 4, 2, 1, 0.6f, 1, 0.1f, 0, tw_groups, 1);
}

int main(void) {
    omp_set_num_threads(2);
    test_ops();
    test_router(0.5f, "top-2, capacity 0.5");
    test_router(0.0f, "top-2, dropless");
    test_model("dense", 1, 1, 2, 1.0f, 1, 0.01f, 0);
    test_model("MoE top-1, capacity 0.5 (drops)", 4, 1, 1, 0.5f, 1, 0.1f, 0);
    test_model("MoE top-2, capacity 0.6, group 2, z-loss", 4, 2, 2, 0.6f, 2, 0.1f, 0.01f);
    test_model("MoE top-2 dropless, aux + z", 3, 2, 1, 0.0f, 1, 0.05f, 0.02f);
    test_routing_family();
    test_llama();
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
