// gemm.h — the one CPU matrix product of ted: every GEMM of the model (dense layers, attention's
// products, the experts, the LM head; forward and backward) goes through gemm_cpu, whose engine
// is chosen here:
//   fp32 compute: OpenBLAS's sgemm or oneDNN's fp32 matmul, per shape by a fixed rule (never by
//     timings taken at run time: the same run gives the same bits);
//   bf16 compute (--bf16 on a CPU with bf16 instructions, AVX512-BF16 or AMX): oneDNN's matmul
//     on bf16 inputs, rounded to nearest even from fp32, accumulating and returning fp32;
//   emulated bf16 compute (TED_GEMM=bf16-emulated, for tests on any CPU): the same operands
//     rounded to bf16 and kept as fp32, through oneDNN's fp32 matmul on the same packed layout —
//     what a bf16 GEMM with fp32 accumulation computes, up to the summation order.
// Without bf16 instructions --bf16 keeps 16-bit storage and computes in fp32 (one line says so).
// The environment variable TED_GEMM overrides: auto (the default), openblas or onednn (every
// fp32 product on that engine), fp32 (--bf16 computes in fp32 even where bf16 instructions
// exist), bf16-emulated.
#pragma once
#include <stddef.h>

// Row-major C[M,N] = alpha·op(A)·op(B) + beta·C, op = transpose when ta / tb, as cblas_sgemm.
// Callable from inside OpenMP parallel regions (it then runs on the calling thread).
void gemm_cpu(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc);

// The run's compute mode: bf16 = the run stores in bf16 on the CPU (--bf16). Reads TED_GEMM (an
// unknown value ends the run with one line) and probes oneDNN's bf16 matmul the first time.
void gemm_setup(int bf16);
// The same choice as TED_GEMM=name, in place of the environment's (tests, benchmarks); takes
// effect at the next gemm_setup. Returns 0, or -1 for an unknown name.
int gemm_choose(const char *name);
// 1 when GEMMs take bf16 inputs now (real or emulated), else 0.
int gemm_bf16_compute(void);
// While on, this thread's products are fp32 whatever the mode (the router's logits stay fp32).
// Returns the previous setting.
int gemm_fp32_only(int on);

typedef enum { GEMM_OPENBLAS, GEMM_ONEDNN } GemmF32Engine;
// The engine an fp32 product of this shape runs on (the rule, or TED_GEMM's choice).
GemmF32Engine gemm_f32_engine(int ta, int tb, int M, int N, int K);

// The start-up line: the engine, the kernel oneDNN picks (a 1024³ product), and why --bf16
// computes in fp32 where it does. No newline.
void gemm_describe(char *out, size_t n);
// The engine and kernel in short, for ted bench's JSON ("openblas", "onednn-bf16", ...).
void gemm_engine_name(char *engine, size_t ne, char *kernel, size_t nk);
// FLOP/s of the best of reps n³ products on the mode's engine, operands already in its input
// type (bf16 compute: bf16), timed by `timer` (ms): the MFU peak.
double gemm_peak_rate(int n, int reps, double (*timer)(void));
