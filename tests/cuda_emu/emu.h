// emu.h — the CUDA subset that ted's kernels use, emulated on the CPU (tests/cuda_emu).
// transform.py puts `#include "emu.h"` at the top of every src/cuda/*.cu it turns into C++;
// emu.cpp implements what is declared here, and the CUDA runtime, cuBLAS and NCCL entry
// points that the real sources call.
//
// Model: one stream, executed in order when the host synchronises (emu.cpp queues every
// kernel, copy, memset and GEMM). A launch runs its blocks one after another; the threads of
// a block run as cooperative fibers on one OS thread when the kernel synchronises
// (__syncthreads, warp shuffles and votes), else as a plain loop. Blocks never overlap, so
// __shared__ is plain static storage.
#pragma once
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

// qualifiers: device code is host code here (the CUDA headers above are already in)
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

// the built-in variables of the thread that runs now
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

// ---- barriers, warp shuffles and votes (emu.cpp; full warps and mask 0xffffffff only) ----
void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
enum EmuShfl { EMU_SHFL_IDX, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR };
// lane `this lane op arg` of the warp hands its 64-bit value to this lane (its own when outside)
uint64_t emu_shfl(unsigned mask, uint64_t bits, EmuShfl op, int arg, int width);
unsigned __ballot_sync(unsigned mask, int pred);
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

template <class T> inline uint64_t emu_to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> inline T emu_from_bits(uint64_t u) { T v; memcpy(&v, &u, sizeof v); return v; }
template <class T> T emu_shfl_as(unsigned m, T v, EmuShfl op, int arg, int w) {
    return emu_from_bits<T>(emu_shfl(m, emu_to_bits(v), op, arg, w));
}
template <class T> T __shfl_sync(unsigned m, T v, int src, int w = 32) { return emu_shfl_as(m, v, EMU_SHFL_IDX, src, w); }
template <class T> T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) {
    return emu_shfl_as(m, v, EMU_SHFL_UP, (int)d, w);
}
template <class T> T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) {
    return emu_shfl_as(m, v, EMU_SHFL_DOWN, (int)d, w);
}
template <class T> T __shfl_xor_sync(unsigned m, T v, int o, int w = 32) { return emu_shfl_as(m, v, EMU_SHFL_XOR, o, w); }

// ---- integer and bit intrinsics --------------------------------------------------------
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline float __uint_as_float(unsigned u) { return emu_from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return (unsigned)emu_to_bits(f); }
inline float __int_as_float(int i) { return emu_from_bits<float>((uint32_t)i); }
inline int __float_as_int(float f) { return (int)(uint32_t)emu_to_bits(f); }
inline double __longlong_as_double(long long i) { return emu_from_bits<double>((uint64_t)i); }
inline long long __double_as_longlong(double d) { return (long long)emu_to_bits(d); }

// atomics: fibers switch only at barriers, so a plain read-modify-write is atomic
template <class T> T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <class T> T atomicMax(T *p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> T atomicMin(T *p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <class T> T atomicExch(T *p, T v) { T old = *p; *p = v; return old; }

// ---- launches: transform.py turns k<<<grid, block, shmem, stream>>>(args) into
// emu_launch<SYNC>("k", grid, block, shmem, stream, [](auto... p) { k(p...); }, args),
// SYNC telling whether k (or a device function it calls) uses a barrier, shuffle or vote.

// one launch: its arguments, evaluated at the launch as CUDA does, and the kernel
struct EmuKernel {
    virtual void run_thread() = 0;   // the kernel body for the thread set in threadIdx/blockIdx
    virtual ~EmuKernel() {}
};
template <class F, class... A> struct EmuKernelOf : EmuKernel {
    F f;
    std::tuple<A...> args;
    EmuKernelOf(F f_, A... a) : f(f_), args(a...) {}
    void run_thread() override { std::apply(f, args); }
};
// queues the launch (takes k); checks the configuration first
void emu_enqueue_launch(const char *name, bool sync, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                        EmuKernel *k);
// a pointer argument must be NULL or point into (or just past) a device allocation
void emu_check_kernel_pointer(const char *kernel, int arg, const void *p);

template <class T> void emu_check_arg(const char *kernel, int i, const T &v) {
    if constexpr (std::is_pointer<T>::value) emu_check_kernel_pointer(kernel, i, (const void *)v);
}
template <bool Sync, class F, class... A>
void emu_launch(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t s, F f, A... args) {
    int i = 0;
    (emu_check_arg(name, i++, args), ...);
    emu_enqueue_launch(name, Sync, grid, block, shmem, s, new EmuKernelOf<F, A...>(f, args...));
}
