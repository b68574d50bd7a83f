// cuda_ops.h — the CUDA backend: the same operations as ops.h, router.h, dispatcher.h and
// experts.h, on device buffers, plus the runtime (device, stream, cuBLAS handle, memory).
// Each cu_X has exactly the arguments and the semantics of the CPU function X; the CPU
// function calls it when the run is on the GPU (ted_device == DEV_CUDA, see device.h).
// Pointers are device pointers unless a comment says "host". Everything runs on one stream
// (cu_stream()); a function that returns a value to the host synchronises.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../alloc.h"
#include "../router.h"
#include "../sparse_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- runtime (runtime.cu) ------------------------------------------------------------
int cu_device_count(void);                 // 0 when there is no GPU or no driver
// Selects GPU local_rank % count, creates the stream and the cuBLAS handle. bf16 != 0: the
// GEMMs take their fp32 operands as bf16 with fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF);
// else plain fp32 (no TF32), so that fp32 runs match the CPU.
void cu_init(int local_rank, int bf16);
const char *cu_device_name(void);
double cu_peak_flops(void);                // datasheet dense bf16 peak in FLOP/s; 0 if unknown
void *cu_malloc(size_t bytes);             // NULL when the device is out of memory
void cu_free(void *p);
// any direction; returns when done, except device to device (ordered in the stream)
void cu_memcpy(void *dst, const void *src, size_t bytes);
void cu_memset0(void *p, size_t bytes);
void cu_sync(void);
int cu_is_device_ptr(const void *p);
void *cu_stream_ptr(void);                 // the stream, as a cudaStream_t (for NCCL calls from C)
// Row-major GEMM as cblas_sgemm: C[M,N] = alpha·op(A)·op(B) + beta·C (fp32 storage).
void cu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);
// Row-major grouped GEMM, one cuBLAS call: for g < n, C_g[M_g,N_g] = op(A_g)·op(B_g) + beta·C_g,
// with host arrays of the sizes. Groups with an empty size are skipped (their C_g untouched,
// also with beta 0). Equal groups at equal strides run as one strided batched GEMM.
void cu_gemm_grouped(int transA, int transB, int n, const int *M, const int *N, const int *K, const float *const *A,
                     int lda, const float *const *B, int ldb, float beta, float *const *C, int ldc);
#ifdef __CUDACC__
}
#include <cuda_runtime.h>
#include <cublas_v2.h>
cudaStream_t cu_stream(void);
cublasHandle_t cu_blas(void);
cublasComputeType_t cu_compute(void);
// CU_CHECK(cudaCall) / CUBLAS_CHECK(cublasCall): one line naming the call and the error, then exit 1
#define CU_CHECK(x) cu_check_((x), #x, __FILE__, __LINE__)
#define CUBLAS_CHECK(x) cu_check_blas_((int)(x), #x, __FILE__, __LINE__)
#define CU_LAUNCH_CHECK() CU_CHECK(cudaGetLastError())
extern "C" {
void cu_check_(cudaError_t e, const char *what, const char *file, int line);
void cu_check_blas_(int status, const char *what, const char *file, int line);
#endif

// ---- element-wise, normalisation, embedding, loss (kernels.cu) ------------------------
void cu_encoder_forward(float *out, const int *tok, const float *wte, int v0, int Vl, const float *wpe, int B,
                        int T, int d);
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int v0, int Vl, int B,
                         int T, int d);
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          long N, int d);
void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, long N, int d);
void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, long N, int C, int OC,
                       int accumulate);
void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                        long N, int C, int OC, int accumulate);
void cu_gelu_forward(float *out, const float *inp, long n);
void cu_gelu_backward(float *dinp, const float *inp, const float *dout, long n);
void cu_crossentropy_max(float *mx, float *tl, const float *logits, const int *targets, long N, int v0, int Vl,
                         int V);
void cu_crossentropy_exp(float *sum, float *logits, const float *mx, long N, int v0, int Vl, int V);
void cu_crossentropy_finish(float *losses, float *probs, const float *mx, const float *sum, const float *tl, long N,
                            int Vl);
void cu_crossentropy_backward(float *probs, const int *targets, long N, int v0, int Vl, float scale);
void cu_residual_forward(float *out, const float *a, const float *b, long n);          // out = a + b
void cu_half_to_f32(float *dst, const uint16_t *src, long n, int half);               // half 1 bf16, 2 fp16
void cu_f32_to_half(uint16_t *dst, const float *src, long n, int half);               // round to nearest even
void cu_half_accumulate(uint16_t *dst, const float *src, long n, int half);           // dst = half(dst + src)
// Optimizer (zero.c): x *= s; Σ (s·x)² in double into *out (a device double); AdamW as zero.c's adam().
void cu_scale(float *x, long n, float s);
void cu_sumsq(double *out, const float *x, long n);
void cu_sumsq_half(double *out, const uint16_t *x, long n, int half, float s);
void cu_upcast_scale(float *dst, const uint16_t *src, long n, int half, float s);     // dst = s·f32(src)
void cu_adamw(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1, float b2,
              float eps, float bc1, float bc2);
double cu_sum(const float *x, long n);   // returns Σ x (in double) to the host

// ---- attention (attention.cu) -----------------------------------------------------------
void cu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd);
// scratch: B·H·T·T floats (device)
void cu_attention_backward(float *dqkv, const float *dout, const float *att, const float *qkv, int B, int T, int H,
                           int hd, float *scratch);

// ---- block-sparse attention (sparse_attention.cu); L is host, its *_d arrays device
void cu_sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B, int T,
                                 int H, int hd);
void cu_sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                                  int B, int T, int H, int hd);

// ---- MoE: router, dispatcher, experts (moe.cu) -----------------------------------------
// st is a host pointer (statistics are added on the host; this synchronises)
void cu_router_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount, int *kept,
                       long N, const RouterCfg *c, RouterStats *st);
void cu_router_backward(float *dlogits, const float *dgate, const float *probs, const float *lse, const int *choice,
                        const float *fcount, long N, const RouterCfg *c, float aux_scale, float z_scale);
void cu_dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d);
void cu_dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d);
void cu_combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d);
void cu_combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                         const int *row, long N, int k, int d);
// Experts (experts.h) with the weights as one Experts struct of device pointers; off is host.
void cu_experts_forward(int El, int d, int f, const float *wfc, const float *bfc, const float *wproj,
                        const float *bproj, float *h, float *hg, float *y, const float *xin, const long *off,
                        int proj_bias);
void cu_experts_backward(int El, int d, int f, const float *wfc, const float *wproj, float *gwfc, float *gbfc,
                         float *gwproj, float *gbproj, float *dxin, float *dhg, const float *dy, const float *xin,
                         const float *h, const float *hg, const long *off, int proj_bias);

#ifdef __cplusplus
}
#endif
