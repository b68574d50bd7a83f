// test_bf16_ops.c — bf16 compute (nn/gemm.h): every product's inputs rounded to bf16, fp32
// accumulation and result.
//   1. GEMMs of every transpose, alpha and beta, sizes below and above the padding bucket: equal to
//      the product in double of the bf16-rounded A and B plus beta·C (C itself not rounded) within
//      fp32 accumulation's bound K·2⁻²³·Σ|a·b|; and away from the unrounded product by more than ten
//      times that bound (the rounding happened).
//   2. The ops' gradients under bf16 compute (matmul, the fused MLP half, nn.Linear, causal attention
//      over blocks, the LM head's product) against central differences of the same function in
//      fp32 compute: the worst |fd − an| over the checked coordinates within OP_TOL = 2e-2 of the
//      largest |fd|. bf16 keeps 8 significant bits: each operand carries up to 2⁻⁹ = 0.2 % relative
//      error, so a gradient through one or two GEMMs of rounded inputs moves by a few 1e-3 of the
//      size of its summands (measured 2–5e-3), while a wrong factor or a missing term shows near 1.
//      The whole model (GPT MoE and llama MoE, top-2 dropless; routers scaled up so that no token
//      changes experts between bf16 and fp32) likewise, each coordinate against the larger of |fd|
//      and its tensor's gradient RMS, within MODEL_TOL = 0.15: two blocks deep, and a router's
//      gradient is a difference of expert outputs that bf16 rounded (measured 3e-2 GPT, 8e-2 llama's
//      router). Each backward must also differ from its fp32-compute twin (the bf16 path ran).
// As is: emulated bf16 compute (TED_GEMM=bf16-emulated), on any CPU. With --native: oneDNN's bf16
// matmul on the CPU's bf16 instructions; exit 77 (skipped) where the CPU has none.
#include "core/alloc.h"
#include "core/half.h"
#include "core/rng.h"
#include "model/model.h"
#include "nn/gemm.h"
#include "nn/linear.h"
#include "nn/ops.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define OP_TOL 2e-2
#define MODEL_TOL 0.15

static int failures, passes;
static uint64_t counter = 1;
static float randn(void) { return rng_normal(40, 3, counter++); }
static void fill(float *x, long n, float s) { for (long i = 0; i < n; i++) x[i] = s * randn(); }
static float *buf(long n) { return ted_alloc(sizeof(float) * n, MEM_TEMP); }
static double dot(const float *a, const float *b, long n) { double s = 0; for (long i = 0; i < n; i++) s += (double)a[i] * b[i]; return s; }
static float bf(float x) { return bf16_to_f32(bf16_from_f32(x)); }
static void report(const char *what, int ok, const char *fmt, double v) {
    printf("%-58s ", what);
    printf(fmt, v);
    printf("  %s\n", ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}
static void compute(int bf16) { gemm_setup(bf16); }

// ---------------------------------------------------------------------------------------
// 1. products

// worst |C − ref| / bound against the rounded (rounded = 1) or plain operands
static double gemm_err(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                       float beta, const float *C0, const float *C, int ldc, int rounded) {
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(long)k * lda + i] : A[(long)i * lda + k], b = tb ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
                if (rounded) { a = bf(a); b = bf(b); }
                s += (double)a * b; mag += fabs((double)a * b);
            }
            double c0 = C0[(long)i * ldc + j], ref = alpha * s + beta * c0;
            double bound = ldexp((double)K + 2, -23) * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
            worst = fmax(worst, fabs(C[(long)i * ldc + j] - ref) / bound);
        }
    return worst;
}

static void check_product(int ta, int tb, int M, int N, int K, float alpha, float beta) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    float *A = buf((long)(ta ? K : M) * lda), *B = buf((long)(tb ? N : K) * ldb), *C0 = buf((long)M * ldc), *C = buf((long)M * ldc);
    fill(A, (long)(ta ? K : M) * lda, 1); fill(B, (long)(tb ? N : K) * ldb, 1); fill(C0, (long)M * ldc, 1);
    memcpy(C, C0, sizeof(float) * M * ldc);
    gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double e = gemm_err(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, C, ldc, 1);
    double away = gemm_err(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, C, ldc, 0);
    int pad = 0;   // the padding columns of C (ldc beyond N) untouched
    for (int i = 0; i < M; i++) pad |= memcmp(C + (long)i * ldc + N, C0 + (long)i * ldc + N, sizeof(float) * 2);
    char name[96];
    snprintf(name, sizeof name, "gemm %c%c %dx%dx%d alpha %g beta %g (err/bound)", ta ? 'T' : 'N', tb ? 'T' : 'N', M, N,
             K, alpha, beta);
    int ok = e <= 1 && away > 10 && !pad;
    printf("%-58s %.2e, unrounded %.0f  %s\n", name, e, away, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
    ted_free(A); ted_free(B); ted_free(C0); ted_free(C);
}

static void test_products(void) {
    int sizes[][3] = {{7, 5, 9}, {64, 64, 64}, {45, 70, 33}, {130, 97, 300}};
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < 4; t++)
            check_product(t >> 1, t & 1, sizes[s][0], sizes[s][1], sizes[s][2], t == 3 ? 0.37f : 1.0f,
                          (float)(s & 1) * (t == 2 ? 0.5f : 1.0f));
}

// ---------------------------------------------------------------------------------------
// 2. gradients: analytic under bf16 compute, central differences in fp32 compute

typedef double (*Fn)(void *ctx);
// The errors: the worst |fd − an| over the checked coordinates against the largest |fd| among them (a
// bf16 error follows the size of the summands, not of their sum, so an entry near 0 has no relative
// error of its own); moved: the worst |g − g32| against the largest |g32|.
static double scaled_diff(const float *g, const float *g32, long n) {
    double e = 0, m = 1e-30;
    for (long i = 0; i < n; i++) { e = fmax(e, fabs(g[i] - g32[i])); m = fmax(m, fabs(g32[i])); }
    return e / m;
}

// the analytic gradient g (bf16 compute) against fp32 differences of f over up to 40 coordinates; g32
// the same gradient in fp32 compute, which g must differ from when products make it (gemm)
static void check(const char *name, Fn f, void *ctx, float *x, const float *g, const float *g32, long n, int gemm) {
    double worst = 0, scale = 1e-30;
    long step = n > 40 ? n / 40 : 1;
    compute(0);
    for (long i = 0; i < n; i += step) {
        float keep = x[i], h = 1e-2f;
        x[i] = keep + h; double fp = f(ctx);
        x[i] = keep - h; double fm = f(ctx);
        x[i] = keep;
        double fd = (fp - fm) / (2.0 * h);
        worst = fmax(worst, fabs(fd - g[i]));
        scale = fmax(scale, fabs(fd));
    }
    compute(1);
    double moved = scaled_diff(g, g32, n);
    char what[96];
    snprintf(what, sizeof what, "%s (err; vs fp32 compute %.1e)", name, moved);
    report(what, worst / scale < OP_TOL && (!gemm || moved > 1e-5), "%.2e", worst / scale);
}

enum { N_ = 24, C_ = 16, OC_ = 12, T_ = 150, H_ = 2, HD_ = 8, V_ = 20 };
typedef struct { float *inp, *w, *b, *h, *out, *R, *att; } Ctx;

static double f_matmul(void *p) { Ctx *c = p; matmul_forward(c->out, c->inp, c->w, c->b, N_, C_, OC_, 0); return dot(c->out, c->R, N_ * OC_); }
static double f_mlp(void *p) { Ctx *c = p; matmul_bias_gelu_forward(c->h, c->out, c->inp, c->w, c->b, N_, C_, OC_); return dot(c->out, c->R, N_ * OC_); }
static double f_linear(void *p) { Ctx *c = p; linear_forward(c->out, OC_, c->inp, C_, c->w, N_, C_, OC_, 0); return dot(c->out, c->R, N_ * OC_); }
static double f_head(void *p) {   // logits[N,V] = x·wteᵀ, as the LM head
    Ctx *c = p;
    gemm(0, 1, N_, V_, C_, 1.0f, c->inp, C_, c->w, C_, 0.0f, c->out, V_);
    return dot(c->out, c->R, N_ * V_);
}
static double f_attention(void *p) { Ctx *c = p; attention_forward(c->out, c->att, c->inp, 1, T_, H_, HD_); return dot(c->out, c->R, T_ * H_ * HD_); }

// backward of op k into gi (input) and gw (weight) in the current compute mode
static void backward(int k, Ctx *c, float *gi, float *gw, float *gb, float *scr) {
    long nw = k == 3 ? V_ * C_ : C_ * OC_;
    memset(gw, 0, sizeof(float) * nw); memset(gb, 0, sizeof(float) * OC_);
    if (k == 0) matmul_backward(gi, gw, gb, c->R, c->inp, c->w, N_, C_, OC_, 0);
    if (k == 1) { f_mlp(c); matmul_bias_gelu_backward(gi, gw, gb, c->att, c->R, c->h, c->inp, c->w, N_, C_, OC_); }
    if (k == 2) linear_backward(gi, C_, gw, c->R, OC_, c->inp, C_, c->w, N_, C_, OC_, 0);
    if (k == 3) {
        gemm(0, 0, N_, C_, V_, 1.0f, c->R, V_, c->w, C_, 0.0f, gi, C_);
        gemm(1, 0, V_, C_, N_, 1.0f, c->R, V_, c->inp, C_, 1.0f, gw, C_);
    }
    if (k == 4) { f_attention(c); attention_backward(gi, c->R, c->att, c->inp, c->out, 1, T_, H_, HD_, scr); }
}

static void test_op_grads(void) {
    static const char *names[] = {"matmul", "matmul+bias+gelu", "linear (nn.Linear layout)", "lm head x·wteᵀ",
                                  "attention T 150"};
    Fn fs[] = {f_matmul, f_mlp, f_linear, f_head, f_attention};
    long nq = (long)T_ * 3 * H_ * HD_;
    Ctx c = {buf(nq), buf(V_ * C_), buf(OC_), buf(N_ * V_), buf(nq), buf(nq), buf((long)H_ * T_ * T_)};
    float *gi[2] = {buf(nq), buf(nq)}, *gw[2] = {buf(V_ * C_), buf(V_ * C_)}, *gb[2] = {buf(OC_), buf(OC_)};
    float *scr = buf(omp_get_max_threads() * attention_scratch_floats(T_));
    for (int k = 0; k < 5; k++) {
        long ni = k == 4 ? nq : N_ * C_, nw = k == 3 ? V_ * C_ : C_ * OC_, no = k == 4 ? T_ * H_ * HD_ : k == 3 ? N_ * V_ : N_ * OC_;
        fill(c.inp, ni, 1); fill(c.w, nw, 0.5f); fill(c.b, OC_, 0.5f); fill(c.R, no, 1);
        for (int m = 0; m < 2; m++) { compute(m == 0); fs[k](&c); backward(k, &c, gi[m], gw[m], gb[m], scr); }
        compute(1);
        char s[96];
        snprintf(s, sizeof s, "%s d(input)", names[k]);
        check(s, fs[k], &c, c.inp, gi[0], gi[1], ni, 1);
        if (k == 4) continue;
        snprintf(s, sizeof s, "%s d(weight)", names[k]);
        check(s, fs[k], &c, c.w, gw[0], gw[1], nw, 1);
        if (k > 1) continue;
        snprintf(s, sizeof s, "%s d(bias)", names[k]);
        check(s, fs[k], &c, c.b, gb[0], gb[1], OC_, 0);
    }
}

// ---------------------------------------------------------------------------------------
// the whole model (fp32 weights, bf16 compute): every tensor, a few coordinates each

static double model_loss(Model *M, const int *tok, const int *tgt, int B, int T) {
    RouterStats before = M->rstats;
    double lm = model_forward(M, tok, tgt, B, T);
    return lm / (B * T) + M->m.aux_coef * (M->rstats.aux_sum - before.aux_sum) / B;
}

static void grads_of(Model *M, const int *tok, const int *tgt, int B, int T, float *g) {
    model_zero_grad(M);
    model_loss(M, tok, tgt, B, T);
    model_backward(M, (float)(1.0 / (B * T)), (float)(M->m.aux_coef / B), 0);
    for (int i = 0, o = 0; i < M->reg.n; o += (int)M->reg.p[i].numel, i++)
        memcpy(g + o, M->reg.p[i].g, sizeof(float) * M->reg.p[i].numel);
}

// the routing of the last forward: every MoE block's set of experts per token (dropless: the order of
// a token's choices and the slots change nothing the loss sees)
static int *routing_of(Model *M, long N) {
    int *s = ted_alloc(sizeof(int) * N * M->k * M->L + 1, MEM_TEMP), n = 0;
    for (int l = 0; l < M->L; l++) {
        if (!M->bp[l].moe) continue;
        for (long t = 0; t < N; t++, n += M->k) {
            memcpy(s + n, M->ba[l].moe.choice + t * M->k, sizeof(int) * M->k);
            for (int a = 1; a < M->k; a++)   // sorted
                for (int b = a; b > 0 && s[n + b] < s[n + b - 1]; b--) { int x = s[n + b]; s[n + b] = s[n + b - 1]; s[n + b - 1] = x; }
        }
    }
    return s;
}
static int same_routing(Model *M, const int *ref, long N) {
    int *r = routing_of(M, N), same = !memcmp(r, ref, sizeof(int) * N * M->k * M->L);
    ted_free(r);
    return same;
}

typedef struct { Config c; Topology topo; Model M; int tok[24], tgt[24], B, T; } ModelCase;   // M points at topo

// The worst |fd − an| (fp32 differences, g from bf16 compute) against the larger of |fd| and the
// tensor's gradient RMS (g32, fp32 compute), 3 coordinates per tensor; those whose differences move
// a token to other experts than ref's are skipped (flips).
static double model_fd(ModelCase *mc, const float *g, const float *g32, const int *ref, int *coords, int *flips,
                       const char **wname) {
    Model *M = &mc->M;
    double worst = 0;
    long o = 0, N = (long)mc->B * mc->T;
    for (int i = 0; i < M->reg.n; o += M->reg.p[i].numel, i++) {
        Param *p = &M->reg.p[i];
        double rms = 0;
        for (long j = 0; j < p->numel; j++) rms += (double)g32[o + j] * g32[o + j];
        rms = sqrt(rms / p->numel) + 1e-12;
        for (int r = 0; r < 3; r++) {
            long j = (long)(rng_at(11, (uint64_t)i, (uint64_t)r) % (uint64_t)p->numel);
            float keep = p->w[j], h = 2e-3f;
            p->w[j] = keep + h; double fp = model_loss(M, mc->tok, mc->tgt, mc->B, mc->T);
            int flip = !same_routing(M, ref, N);
            p->w[j] = keep - h; double fm = model_loss(M, mc->tok, mc->tgt, mc->B, mc->T);
            flip |= !same_routing(M, ref, N);
            p->w[j] = keep;
            if (flip) { (*flips)++; continue; }   // a routing choice changed: no derivative there
            double fd = (fp - fm) / (2.0 * h), e = fabs(fd - g[o + j]) / fmax(fabs(fd), rms);
            if (e > worst) { worst = e; *wname = p->name; }
            (*coords)++;
        }
    }
    return worst;
}

// A small MoE model with fp32 storage (compute() picks the GEMMs' inputs); returns its parameter count.
static long model_case(ModelCase *mc, int llama) {
    config_defaults(&mc->c);
    ModelConfig *m = &mc->c.model;
    m->vocab_size = 11; m->n_positions = 8; m->n_embd = 16; m->n_layer = 2; m->n_head = 2; m->n_inner = 24;
    m->num_experts = 4; m->top_k = 2; m->moe_every = 1; m->capacity_factor = 0; m->aux_coef = 0.05f;
    if (llama) { m->arch = ARCH_LLAMA; m->n_kv_head = 1; m->expert_type = EXPERT_SWIGLU; m->router = ROUTER_MIXTRAL; }
    mc->B = 4; mc->T = 6;
    topo_init(&mc->topo, 1, 1, 1);
    model_build(&mc->M, &mc->c, &mc->topo, mc->B, mc->T);
    long n = 0;
    for (int i = 0; i < mc->M.reg.n; i++) {
        Param *p = &mc->M.reg.p[i];
        // routers 10× larger: choices far from ties, so bf16's rounding moves no token to another expert
        float sc = strstr(p->name, "router") || strstr(p->name, "moe.gate.") ? 2.0f : p->ndim == 2 ? 0.2f : 0.1f;
        for (long j = 0; j < p->numel; j++) p->w[j] = (strstr(p->name, "weight") && p->ndim == 1 ? 1.0f : 0.0f) + sc * randn();
        n += p->numel;
    }
    for (int i = 0; i < mc->B * mc->T; i++) { mc->tok[i] = (i * 7 + 3) % 11; mc->tgt[i] = (i * 5 + 1) % 11; }
    return n;
}

static void test_model(const char *name, int llama) {
    ModelCase mc;
    long n = model_case(&mc, llama), N = (long)mc.B * mc.T;
    float *g = buf(n), *g32 = buf(n);
    compute(0); grads_of(&mc.M, mc.tok, mc.tgt, mc.B, mc.T, g32);
    compute(1); grads_of(&mc.M, mc.tok, mc.tgt, mc.B, mc.T, g);
    model_loss(&mc.M, mc.tok, mc.tgt, mc.B, mc.T);
    int *ref = routing_of(&mc.M, N);   // bf16 compute's; fp32's must be the same for the check to hold
    compute(0); model_loss(&mc.M, mc.tok, mc.tgt, mc.B, mc.T);
    int routed = same_routing(&mc.M, ref, N), coords = 0, flips = 0;
    const char *wname = "";
    double worst = model_fd(&mc, g, g32, ref, &coords, &flips, &wname), moved = scaled_diff(g, g32, n);
    ted_free(ref);
    compute(1);
    printf("  %d coordinates, %d skipped (routing flip), worst in %s; routing in bf16 = fp32: %s\n", coords, flips, wname,
           routed ? "yes" : "NO");
    char what[96];
    snprintf(what, sizeof what, "model %s (err; vs fp32 compute %.1e)", name, moved);
    report(what, routed && flips * 4 < coords && worst < MODEL_TOL && moved > 1e-5, "%.2e", worst);
    model_free(&mc.M);
    ted_free(g); ted_free(g32);
}

int main(int argc, char **argv) {
    int native = argc > 1 && !strcmp(argv[1], "--native");
    omp_set_num_threads(2);
    gemm_choose(native ? "auto" : "bf16-emulated");
    compute(1);
    char line[512];
    gemm_describe(line, sizeof line);
    printf("%s\n", line);
    if (!gemm_bf16_compute()) { printf("skipped: no bf16 compute on this CPU (the line above says why)\n"); return 77; }
    test_products();
    test_op_grads();
    test_model("GPT MoE top-2 dropless", 0);
    test_model("llama MoE mixtral top-2 dropless", 1);
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
