// device.h — the GPU runtime as the rooms see it (implemented in src/cuda/runtime.cu, built
// with the CUDA backend): the device, its memory, its one stream. Pointers are device
// pointers unless a comment says "host"; a function that returns a value to the host synchronises.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {   // implemented in CUDA C++ (src/cuda)
#endif

int cu_device_count(void);                 // 0 when there is no GPU or no driver
// Selects GPU local_rank % count, creates the stream and the cuBLAS handle, and sets the run's
// precision (cu_set_bf16).
void cu_init(int local_rank, int bf16);
// bf16 != 0 (a --bf16 run): the ops read their weights as bf16 (the registry's bf16 weights,
// reg_op_weights) and every GEMM multiplies bf16 A and B with fp32 accumulation into fp32
// (CUBLAS_COMPUTE_32F); fp32 activations are copied to bf16 at the GEMM. bf16 0: fp32 weights
// and fp32 GEMMs (no TF32), so that fp32 runs match the CPU. The op tests switch between the two.
void cu_set_bf16(int bf16);
int cu_bf16(void);
const char *cu_device_name(void);
int cu_sm_count(void);                     // the GPU's streaming multiprocessors
size_t cu_smem_per_sm(void);               // its shared memory an SM, bytes (0 before cu_init)
double cu_peak_flops(void);                // datasheet dense bf16 peak in FLOP/s; 0 if unknown
void *cu_malloc(size_t bytes);             // NULL when the device is out of memory
void cu_free(void *p);
// any direction; returns when the host may use its side: a copy to the host when done, one from
// pageable host memory at once (staged), device to device ordered in the stream
void cu_memcpy(void *dst, const void *src, size_t bytes);
void cu_memset(void *p, int byte, size_t bytes);   // in the stream
void cu_sync(void);
int cu_is_device_ptr(const void *p);
void *cu_stream_ptr(void);                 // the stream, as a cudaStream_t (for NCCL calls from C)
void cu_stream_sync(void);                 // the host waits for the stream (every wait goes through here)

// TED_GPU_PROF=1 (src/cuda/profile.cu; docs/gpus.md): the stream's time per training step by
// kind of work, with the kernel launches, cuBLAS calls and copies of each kind and the host's
// waits, as one JSON line per rank on stderr at exit. Each op names its kind and itself (its
// function's name): enter returns what to leave back to. A step ends where the optimizer steps
// (zero.c). TED_GPU_PROF=2 adds one line per op ("site": a GEMM's is its shape) with its time.
enum { PROF_OTHER, PROF_GEMM, PROF_ATTENTION, PROF_ELEMENTWISE, PROF_CAST, PROF_MOE, PROF_OPTIMIZER, PROF_LOSS,
       PROF_COPY, PROF_COMM, PROF_IDLE, PROF_N };
void cu_prof_init(int rank);               // on when TED_GPU_PROF is set (cu_init calls it)
int cu_prof_enter(int kind, const char *site);
void cu_prof_leave(int prev);
void cu_prof_launch(int n);                // n launches of the current op's kind
void cu_prof_count(int kind, int n);       // n launches of the given kind
// the current op's site becomes the GEMM of this shape (batch problems, beta), its FLOPs counted
void cu_prof_gemm(int transA, int transB, long M, long N, long K, long batch, float beta);
void cu_prof_step(void);

#ifdef __cplusplus
}
#endif
