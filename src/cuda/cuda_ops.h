// cuda_ops.h — the CUDA backend's own header: every cu_ function it implements, as the rooms
// declare them next to their CPU twins (core/device.h, nn/ops_cuda.h, parallel/adam_cuda.h,
// moe/moe_cuda.h, moe/router.h), plus what only the .cu files see (stream, cuBLAS handle, checks).
// Each cu_X has exactly the arguments and the semantics of the CPU function X; the CPU
// function calls it when the run is on the GPU (ted_device == DEV_CUDA, see device.h).
// Pointers are device pointers unless a comment says "host". Everything runs on one stream
// (cu_stream()); a function that returns a value to the host synchronises.
#pragma once
#include "core/alloc.h"
#include "core/device.h"
#include "moe/moe_cuda.h"
#include "moe/router.h"
#include "nn/ops_cuda.h"
#include "parallel/adam_cuda.h"

#ifdef __cplusplus
extern "C"
#endif
void cu_lt_counts(long *asked, long *calls);   // gemm_lt.cu: heuristic queries, GEMMs through cuBLASLt so far
#ifdef __cplusplus
extern "C"
#endif
void cu_lt_tuned(long *tuned, long *moved);   // gemm_lt.cu: classes timed, those where a later candidate won
// GEMMs with GELU's epilogue on a bf16 run (nn.cu), GELU's input and output in bf16 only: h16, hg16
// [M, f] (rows f apart) = x16·w + bias and its GELU, x16 [M, K] and w [K, f] bf16 operands, bias [f]
// the run's bf16 weight or NULL; dh16 [M, f] = (g16·wᵀ) ⊙ GELU'(h16), g16 [M, N], w [f, N]. Through
// cuBLASLt's GELU_AUX_BIAS and DGELU epilogues (TED_LT_GELU=0: not), else the GEMM into an fp32
// scratch and a pass.
#ifdef __cplusplus
extern "C" {
#endif
void cu_gemm_gelu16(const void *x16, const void *w, const float *bias, uint16_t *h16, uint16_t *hg16, long M, int K,
                    int f);
void cu_gemm_dgelu16(const void *g16, const void *w, const uint16_t *h16, uint16_t *dh16, long M, int N, int f);
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cublas_v2.h>
cudaStream_t cu_stream(void);
cublasHandle_t cu_blas(void);
// GEMM operands (runtime.cu). A run's GEMMs take operands of one type: fp32 on an fp32 run, bf16
// on a --bf16 run (fp32 accumulation and fp32 C either way). Weights are in that type already
// (a bf16 run's registry holds bf16 weights, reg_op_weights); an fp32 activation becomes an
// operand through cu_operand, which on a bf16 run writes its bf16 copy into one of 4 scratch
// slots (two operands of one GEMM take two slots). Part 2 of the bf16 contract keeps the
// activations in bf16 and drops these copies.
const void *cu_operand(const float *x, long n, int slot);   // x[n] as an operand: x, or its bf16 copy
uint16_t *cu_half_slot(long n, int slot);                  // slot's buffer, room for n bf16 (not written)
const void *cu_at(const void *p, long i);                   // element i of an operand
// On a bf16 run the MLPs' hg (the GELU output, read only as the second GEMM's operand and by its
// weight gradient) and the attention's output (attn_proj_forward) are kept in bf16 only, in the
// first half of their fp32 room: element i here
static inline uint16_t *cu_hg_half(const float *hg) { return (uint16_t *)hg; }
// A --bf16 run's flash attention (flash_attention.cu) from qkv in bf16 (qkv16): the output's bf16
// copy o16 written; the backward from the forward's o16 and dout's bf16 copy (slot 1), dqkv in fp32
// or (dqkv NULL) in bf16 into dqkv16
void cu_attention_bf16_forward(uint16_t *o16, float *att, const uint16_t *qkv16, int B, int T, int H, int hd);
void cu_attention_bf16_backward(float *dqkv, uint16_t *dqkv16, const float *dout, const float *att,
                                const uint16_t *qkv16, const uint16_t *o16, int B, int T, int H, int hd,
                                float *scratch);
// C[M,N] (fp32) = alpha·op(A)·op(B) + beta·C, row-major, A and B operands of the run's type
void cu_gemm_op(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
                int ldb, float beta, float *C, int ldc);
// the same with bf16 A, B and C (a --bf16 run only)
void cu_gemm_op_c16(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
                    int ldb, float beta, uint16_t *C, int ldc);
// The same through cuBLASLt (the experts' bf16 GEMMs), the heuristic's algorithm kept per class of shape
// (gemm_lt.cu); 0, or the library's status when it refused (then take cublasGemmEx). Batch
// problems at strides sA, sB (elements) and sC (floats) when batch > 1.
extern "C" int cu_lt_gemm(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
                          long long sA, const void *B, int ldb, long long sB, float beta, void *C, int c16, int ldc,
                          long long sC, int batch);
// A bf16 GEMM with cuBLASLt's GELU epilogues, row-major C[M,N] bf16 (ldc; beta 0): the forward
// (backward 0) C = GELU(op(A)·op(B) + bias) with aux = op(A)·op(B) + bias, GELU's input kept for
// the backward (bias [N] bf16, or NULL: none); the backward C = (op(A)·op(B)) ⊙ GELU'(aux). aux:
// bf16 [M, N] at C's stride. 0, or the library's status when it has no algorithm for it (then the
// caller's own passes).
extern "C" int cu_lt_gemm_gelu(int backward, int transA, int transB, int M, int N, int K, const void *A, int lda,
                               const void *B, int ldb, const uint16_t *bias, uint16_t *C, uint16_t *aux, int ldc);
// the same for batch problems at strides sA, sB (elements of the operand type) and sC (floats)
void cu_gemm_op_sb(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda, long long sA,
                   const void *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC, int batch);
// whether a bf16 run's experts' GEMMs go through cuBLASLt (not with TED_GEMM_LT=0)
int cu_gemm_lt_on(void);
// The fused GELU passes of nn.cu that the experts (moe.cu) share. For the rows r in [r0, r1) of
// h[·, f] after its GEMM: h += the bias row (bias [f]; with off, the El+1 device row offsets of
// the experts, bias [El, f] and row r's expert's row; bias may be NULL), hg = GELU(h) (unless
// NULL), and hg16 (unless NULL) = hg in bf16, the next GEMM's operand.
void cu_bias_gelu_forward(float *h, float *hg, uint16_t *hg16, const float *bias, const long *off, int El, long r0,
                          long r1, int f);
// The experts' bias gradients (host offsets off[0..El] of their rows), each column summed over an
// expert's rows in chunks, a fixed order: gb[e, c] += Σ_r g[r, c]; and, in the same pass as the
// GELU's gradient, gb[e, c] += Σ_r dh[r, c] with dh = dhg ⊙ GELU'(h) written over the rows
// [off[0], off[El]) (dh may be dhg) with its bf16 copy dh16 unless NULL (gb NULL: dh alone).
void cu_experts_bias_grad(float *gb, const float *g, const long *off, int El, int n);
void cu_experts_bias_grad16(float *gb, const uint16_t *g16, const long *off, int El, int n);   // g16 bf16
void cu_experts_gelu_backward(float *gb, float *dh, uint16_t *dh16, const float *dhg, const float *h, const long *off,
                              int El, int f);
// CU_CHECK(cudaCall) / CUBLAS_CHECK(cublasCall): one line naming the call and the error, then exit 1
#define CU_CHECK(x) cu_check_((x), #x, __FILE__, __LINE__)
#define CUBLAS_CHECK(x) cu_check_blas_((int)(x), #x, __FILE__, __LINE__)
#define CU_LAUNCH_CHECK() (CU_CHECK(cudaGetLastError()), cu_prof_launch(1))
// the op's kind of work for TED_GPU_PROF (core/device.h), for the rest of the scope; the
// function's name is its site
struct ProfScope {
    int prev;
    ProfScope(int kind, const char *site) : prev(cu_prof_enter(kind, site)) {}
    ~ProfScope() { cu_prof_leave(prev); }
};
#define PROF(kind) ProfScope prof_scope_(kind, __func__)
extern "C" {
void cu_check_(cudaError_t e, const char *what, const char *file, int line);
void cu_check_blas_(int status, const char *what, const char *file, int line);
}
#endif
