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

#ifdef __CUDACC__
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
}
#endif
