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
double cu_peak_flops(void);                // datasheet dense bf16 peak in FLOP/s; 0 if unknown
void *cu_malloc(size_t bytes);             // NULL when the device is out of memory
void cu_free(void *p);
// any direction; returns when done, except device to device (ordered in the stream)
void cu_memcpy(void *dst, const void *src, size_t bytes);
void cu_memset0(void *p, size_t bytes);
void cu_sync(void);
int cu_is_device_ptr(const void *p);
void *cu_stream_ptr(void);                 // the stream, as a cudaStream_t (for NCCL calls from C)

#ifdef __cplusplus
}
#endif
