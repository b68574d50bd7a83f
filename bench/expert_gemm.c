// expert_gemm.c — one batched call against the per-expert loop, on the experts' GEMM shapes.
// The question (issue 24): does one call over a rank's experts beat E OpenBLAS sgemm calls?
// Debian's OpenBLAS 0.3.21 has no batched, grouped or packed sgemm (nm -D shows none), so the
// batched candidate is oneDNN 2.6's matmul primitive with a batch dimension (equal rows per
// expert, as with capacity factor 1.0). Times are CPU time (getrusage), 1 thread, medians.
//
// Built as build/expert_gemm where libdnnl is installed:
//   OMP_NUM_THREADS=1 build/expert_gemm [E n d f reps]      (default: 8 512 256 1024 20)
#include <cblas.h>
#include <math.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double cpu_ms(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e3 + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e3;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

#define CK(x) do { if ((x) != dnnl_success) { fprintf(stderr, "dnnl: %s failed\n", #x); exit(1); } } while (0)

// One oneDNN batched matmul out[E,n,N] = op(a)[E,n,K]·op(b)[E,K,N], built once, run per call;
// a transposed operand is the same memory read with swapped strides (tag acb).
typedef struct { dnnl_primitive_t p; dnnl_memory_t a, b, c; } Bmm;

static Bmm bmm_make(dnnl_engine_t eng, int E, int n, int K, int N, int ta, int tb, float *a, float *b, float *c) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t da = {E, n, K}, db = {E, K, N}, dc = {E, n, N};
    CK(dnnl_memory_desc_init_by_tag(&ad, 3, da, dnnl_f32, ta ? dnnl_acb : dnnl_abc));
    CK(dnnl_memory_desc_init_by_tag(&bd, 3, db, dnnl_f32, tb ? dnnl_acb : dnnl_abc));
    CK(dnnl_memory_desc_init_by_tag(&cd, 3, dc, dnnl_f32, dnnl_abc));
    dnnl_matmul_desc_t md;
    CK(dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd));
    dnnl_primitive_desc_t pd;
    CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
    Bmm m;
    CK(dnnl_primitive_create(&m.p, pd));
    const char *impl = NULL;
    CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    printf("  oneDNN matmul [%d,%d,%d]x[%d,%d,%d]: implementation %s\n", E, n, K, E, K, N, impl);
    CK(dnnl_memory_create(&m.a, &ad, eng, a));
    CK(dnnl_memory_create(&m.b, &bd, eng, b));
    CK(dnnl_memory_create(&m.c, &cd, eng, c));
    dnnl_primitive_desc_destroy(pd);
    return m;
}

static void bmm_run(Bmm *m, dnnl_stream_t s) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m->a}, {DNNL_ARG_WEIGHTS, m->b}, {DNNL_ARG_DST, m->c}};
    CK(dnnl_primitive_execute(m->p, s, 3, args));
    CK(dnnl_stream_wait(s));
}

static void loop_run(int E, int n, int K, int N, int ta, int tb, const float *a, const float *b, float *c) {
    for (int e = 0; e < E; e++)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, N, K, 1.0f,
                    a + (long)e * n * K, ta ? n : K, b + (long)e * K * N, tb ? K : N, 0.0f, c + (long)e * n * N, N);
}

// The same products as E calls of oneDNN's own sgemm (is a gain the batching or the kernel?)
static void dnnl_loop_run(int E, int n, int K, int N, int ta, int tb, const float *a, const float *b, float *c) {
    for (int e = 0; e < E; e++)   // dnnl_sgemm is row-major
        CK(dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', n, N, K, 1.0f, a + (long)e * n * K, ta ? n : K,
                      b + (long)e * K * N, tb ? K : N, 0.0f, c + (long)e * n * N, N));
}

static void shape(dnnl_engine_t eng, dnnl_stream_t s, int E, int n, int K, int N, int ta, int tb, int reps) {
    float *a = malloc(sizeof(float) * E * n * K), *b = malloc(sizeof(float) * E * K * N);
    float *c1 = malloc(sizeof(float) * E * n * N), *c2 = malloc(sizeof(float) * E * n * N);
    for (long i = 0; i < (long)E * n * K; i++) a[i] = (float)rand() / RAND_MAX - 0.5f;
    for (long i = 0; i < (long)E * K * N; i++) b[i] = (float)rand() / RAND_MAX - 0.5f;
    Bmm m = bmm_make(eng, E, n, K, N, ta, tb, a, b, c2);
    loop_run(E, n, K, N, ta, tb, a, b, c1);
    bmm_run(&m, s);
    double err = 0;
    for (long i = 0; i < (long)E * n * N; i++) { double d = c1[i] - c2[i]; err = d * d > err ? d * d : err; }
    double tl[64], tbm[64], td[64], fl = 2.0 * E * n * K * N;
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {   // alternated
        double t0 = cpu_ms(); loop_run(E, n, K, N, ta, tb, a, b, c1); tl[r] = cpu_ms() - t0;
        t0 = cpu_ms(); bmm_run(&m, s); tbm[r] = cpu_ms() - t0;
        t0 = cpu_ms(); dnnl_loop_run(E, n, K, N, ta, tb, a, b, c2); td[r] = cpu_ms() - t0;
    }
    qsort(tl, reps, sizeof(double), cmp); qsort(tbm, reps, sizeof(double), cmp); qsort(td, reps, sizeof(double), cmp);
    double ml = tl[reps / 2], mb = tbm[reps / 2], md = td[reps / 2];
    printf("  OpenBLAS loop %6.2f ms (%4.1f GFLOP/s) | oneDNN batched %6.2f ms (%4.1f) | oneDNN sgemm loop %6.2f ms "
           "(%4.1f) | batched/OpenBLAS %.2f | max |diff| %.1e\n", ml, fl / ml / 1e6, mb, fl / mb / 1e6, md,
           fl / md / 1e6, mb / ml, err > 0 ? sqrt(err) : 0.0);
    dnnl_primitive_destroy(m.p);
    free(a); free(b); free(c1); free(c2);
}

int main(int argc, char **argv) {
    int E = argc > 1 ? atoi(argv[1]) : 8, n = argc > 2 ? atoi(argv[2]) : 512, d = argc > 3 ? atoi(argv[3]) : 256;
    int f = argc > 4 ? atoi(argv[4]) : 1024, reps = argc > 5 ? atoi(argv[5]) : 20;
    dnnl_engine_t eng;
    dnnl_stream_t s;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&s, eng, dnnl_stream_default_flags));
    printf("E %d experts, %d rows each, d %d, f %d; CPU time, medians of %d alternated\n", E, n, d, f, reps);
    printf("c_fc forward  x[n,d]·W[d,f]:\n");
    shape(eng, s, E, n, d, f, 0, 0, reps);
    printf("c_proj forward  h[n,f]·W[f,d]:\n");
    shape(eng, s, E, n, f, d, 0, 0, reps);
    printf("c_proj backward, input gradient  dy[n,d]·W[f,d]ᵀ:\n");
    shape(eng, s, E, n, d, f, 0, 1, reps);
    printf("c_fc backward, input gradient  dh[n,f]·W[d,f]ᵀ:\n");
    shape(eng, s, E, n, f, d, 0, 1, reps);
    printf("c_fc backward, weight gradient  x[n,d]ᵀ·dh[n,f]:\n");
    shape(eng, s, E, d, n, f, 1, 0, reps);
    printf("c_proj backward, weight gradient  h[n,f]ᵀ·dy[n,d]:\n");
    shape(eng, s, E, f, n, d, 1, 0, reps);
    return 0;
}
