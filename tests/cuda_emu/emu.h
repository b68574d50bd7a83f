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
#define TED_CUDA_EMU 1   // src/cuda/mma.cuh then calls the emulation below instead of PTX
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

// =======================================================================================
// Dynamic shared memory, asynchronous copies and warp matrix operations (what
// src/cuda/flash_attention.cu uses). emu.cpp's section "dynamic shared memory, async copies,
// warp collectives" implements the functions declared here.

// ---- dynamic shared memory. transform.py turns `extern __shared__ T name[];` (inside a
// kernel) into `T *name = (T *)emu_dynamic_shared();`: the launch's buffer of its size, filled
// with NaN bytes at the start of every block (shared memory is not initialised on a GPU).
void *emu_dynamic_shared(void);
// A launch with dynamic shared memory names its kernel (transform.py passes its address), so
// that the size is checked against 48 KB or the kernel's cudaFuncSetAttribute(
// cudaFuncAttributeMaxDynamicSharedMemorySize), itself at most 227 KB (sm_90).
void emu_enqueue_launch_dynamic(const char *name, const void *fn, bool sync, dim3 grid, dim3 block, size_t shmem,
                                cudaStream_t s, EmuKernel *k);
// the C++ form that nvcc's cuda_runtime.h adds (kernels are host functions here)
template <class T> cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)kernel, attr, value);
}
template <bool Sync, class F, class... A>
void emu_launch_dynamic(const char *name, const void *fn, dim3 grid, dim3 block, size_t shmem, cudaStream_t s, F f,
                        A... args) {
    int i = 0;
    (emu_check_arg(name, i++, args), ...);
    emu_enqueue_launch_dynamic(name, fn, Sync, grid, block, shmem, s, new EmuKernelOf<F, A...>(f, args...));
}

// ---- asynchronous copies (cuda_pipeline_primitives.h, cp.async on sm_80+): a thread's copies
// are held until its __pipeline_wait_prior releases their commit group (the latest a GPU may
// complete them), so that a missing wait or barrier reads stale shared memory.
#define _CUDA_PIPELINE_PRIMITIVES_H_   // the real header's device code is replaced by these
void __pipeline_memcpy_async(void *dst_shared, const void *src_global, size_t size_and_align, size_t zfill = 0);
void __pipeline_commit(void);
void __pipeline_wait_prior(size_t prior);

// ---- warp collectives: each of the 32 lanes of a warp hands in `arg`; when the last one
// arrives, run(args of lanes 0..31) runs once, the others waiting (as a *_sync warp operation
// that waits for all lanes, then acts for the whole warp at once).
void emu_warp_collective(int op, void *arg, void (*run)(void *const *args));
int emu_lane(void);   // the lane of the running thread in its warp
// [p, p + bytes) must lie in the dynamic shared memory, one device allocation or (not
// checked) static shared memory
void emu_check_tile(const char *what, const void *p, size_t bytes);
[[noreturn]] void emu_fail(const char *fmt, ...);

// ---- the PTX warp-level matrix instructions of src/cuda/mma.cuh, in the layouts the PTX ISA
// documents for them (mma.cuh's comment): mma.sync.m16n8k16 (bf16 A and B, fp32 C and D: an
// exact sum rounded once to fp32) and ldmatrix.m8n8.x1/x2/x4(.trans).b16 (each row 16 bytes,
// 16-byte aligned, in shared memory). Both act for the whole warp once its 32 lanes arrived.
void emu_mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b);
void emu_ldmatrix(uint32_t *r, int n, bool trans, const void *p);

// ---- nvcuda::wmma: 16x16x16 bf16/fp16 and 16x16x8 TF32 products with fp32 accumulators.
// A fragment holds rows·cols/32 elements per lane, placed by a mapping of the emulation's own
// (unlike any GPU's: CUDA leaves it unspecified), so code that assumes a layout fails here;
// fragments of one type share the mapping, as on the GPU. Loads and stores check the 256-bit
// alignment and the ldm rule of the CUDA documentation and the extent of the tile, and that the
// 32 lanes pass the same; a load and a product act for the whole warp once all lanes arrived, a
// store lets each lane write its own elements (a missing __syncwarp after it shows); products
// are exact (double) sums rounded once to fp32; TF32 operands keep their upper 19 bits.
#include <mma.h>   // defines nothing without nvcc
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision { struct tf32 {}; }
enum layout_t { mem_row_major, mem_col_major };

template <class T> struct emu_storage { typedef T type; };
template <> struct emu_storage<precision::tf32> { typedef float type; };
template <class Use, int M, int N, int K> struct emu_dims;
template <int M, int N, int K> struct emu_dims<matrix_a, M, N, K> { enum { rows = M, cols = K, mult = 37, add = 11 }; };
template <int M, int N, int K> struct emu_dims<matrix_b, M, N, K> { enum { rows = K, cols = N, mult = 53, add = 5 }; };
template <int M, int N, int K> struct emu_dims<accumulator, M, N, K> { enum { rows = M, cols = N, mult = 91, add = 29 }; };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && (K == 16 || K == 8), "wmma: only the m16n16k16 and m16n16k8 shapes are emulated");
    static_assert(std::is_same<Use, accumulator>::value ? std::is_same<T, float>::value
                  : K == 16 ? std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value
                            : std::is_same<T, precision::tf32>::value,
                  "wmma: fragment type not emulated (bf16/fp16 with k 16, tf32 with k 8, fp32 accumulators)");
    typedef T element_type;
    typedef typename emu_storage<T>::type storage_element_type;
    enum { rows = emu_dims<Use, M, N, K>::rows, cols = emu_dims<Use, M, N, K>::cols };
    enum { num_elements = rows * cols / 32, num_storage_elements = num_elements };
    storage_element_type x[num_elements];
    // lane and index of element (r, c): an odd multiple of the row-major index, modulo the size
    static void place(int r, int c, int *lane, int *i) {
        int p = ((r * cols + c) * emu_dims<Use, M, N, K>::mult + emu_dims<Use, M, N, K>::add) & (rows * cols - 1);
        *lane = p & 31;
        *i = p >> 5;
    }
};

inline float __float_to_tf32(float f) {   // cvt.rna.tf32.f32: 10 mantissa bits, ties away from 0
    uint32_t u = emu_to_bits(f) & 0xffffffffu;
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    return emu_from_bits<float>(u);
}
template <class F, class V> void fill_fragment(F &f, const V &v) {
    for (int i = 0; i < F::num_elements; i++) f.x[i] = (typename F::storage_element_type)v;
}

template <class T> inline double emu_value(T v) { return (double)(float)v; }
inline double emu_tf32(float v) { return (double)emu_from_bits<float>((uint32_t)emu_to_bits(v) & ~0x1fffu); }

enum { EMU_WMMA_LOAD = 32, EMU_WMMA_STORE, EMU_WMMA_MMA };
template <class F, class P> struct EmuTile { F *f; P *p; unsigned ldm; bool col; };

// the tile arguments of the 32 lanes must agree; alignment, ldm and extent are checked
template <class F, class P> void emu_check_tiles(const char *what, void *const *args) {
    const EmuTile<F, P> *t0 = (const EmuTile<F, P> *)args[0];
    for (int l = 1; l < 32; l++) {
        const EmuTile<F, P> *t = (const EmuTile<F, P> *)args[l];
        if (t->p != t0->p || t->ldm != t0->ldm || t->col != t0->col)
            emu_fail("wmma::%s: lanes 0 and %d pass different pointers, ldm or layouts", what, l);
    }
    if ((uintptr_t)t0->p % 32) emu_fail("wmma::%s: pointer %p is not 256-bit aligned", what, (const void *)t0->p);
    if ((t0->ldm * sizeof(P)) % 16) emu_fail("wmma::%s: ldm %u is not a multiple of 16 bytes", what, t0->ldm);
    int outer = t0->col ? F::cols : F::rows, inner = t0->col ? F::rows : F::cols;
    if (t0->ldm < (unsigned)inner) emu_fail("wmma::%s: ldm %u below the tile's %d", what, t0->ldm, inner);
    emu_check_tile(what, t0->p, ((size_t)(outer - 1) * t0->ldm + inner) * sizeof(P));
}
template <class F, class P> void emu_wmma_load_all(void *const *args) {
    emu_check_tiles<F, P>("load_matrix_sync", args);
    const EmuTile<F, P> *t0 = (const EmuTile<F, P> *)args[0];
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) {
            int lane, i;
            F::place(r, c, &lane, &i);
            P v = t0->p[t0->col ? (size_t)c * t0->ldm + r : (size_t)r * t0->ldm + c];
            ((const EmuTile<F, P> *)args[lane])->f->x[i] = (typename F::storage_element_type)v;
        }
}
template <class F, class P> void emu_wmma_check_store(void *const *args) {
    emu_check_tiles<F, P>("store_matrix_sync", args);
}
template <class Use, int M, int N, int K, class T, class L, class P>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "wmma: an accumulator load takes a layout");
    static_assert(std::is_same<P, typename fragment<Use, M, N, K, T, L>::storage_element_type>::value,
                  "wmma: the pointer's type is not the fragment's");
    EmuTile<fragment<Use, M, N, K, T, L>, const P> t{&f, p, ldm, std::is_same<L, col_major>::value};
    emu_warp_collective(EMU_WMMA_LOAD, &t, emu_wmma_load_all<fragment<Use, M, N, K, T, L>, const P>);
}
template <int M, int N, int K> void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                                                     unsigned ldm, layout_t layout) {
    EmuTile<fragment<accumulator, M, N, K, float>, const float> t{&f, p, ldm, layout == mem_col_major};
    emu_warp_collective(EMU_WMMA_LOAD, &t, emu_wmma_load_all<fragment<accumulator, M, N, K, float>, const float>);
}
// A store waits for the warp, then each lane writes its own elements when it runs on: a lane
// that reads another's without a __syncwarp first may see the old values.
template <int M, int N, int K> void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                                                      unsigned ldm, layout_t layout) {
    typedef fragment<accumulator, M, N, K, float> F;
    EmuTile<const F, float> t{&f, p, ldm, layout == mem_col_major};
    emu_warp_collective(EMU_WMMA_STORE, &t, emu_wmma_check_store<const F, float>);
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) {
            int lane, i;
            F::place(r, c, &lane, &i);
            if (lane == emu_lane()) p[layout == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[i];
        }
}

template <class D, class A, class B> struct EmuMma { D *d; const A *a; const B *b; const D *c; };
template <class F> double emu_operand(const F &f, int i) {
    if constexpr (std::is_same<typename F::element_type, precision::tf32>::value) return emu_tf32(f.x[i]);
    else return emu_value(f.x[i]);
}
template <class D, class A, class B> void emu_wmma_mma_all(void *const *args) {
    double a[16][16], b[16][16], c[16][16];
    int lane, i;
    for (int r = 0; r < A::rows; r++)
        for (int k = 0; k < A::cols; k++) { A::place(r, k, &lane, &i); a[r][k] = emu_operand(*((const EmuMma<D, A, B> *)args[lane])->a, i); }
    for (int k = 0; k < B::rows; k++)
        for (int n = 0; n < B::cols; n++) { B::place(k, n, &lane, &i); b[k][n] = emu_operand(*((const EmuMma<D, A, B> *)args[lane])->b, i); }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) { D::place(r, n, &lane, &i); c[r][n] = ((const EmuMma<D, A, B> *)args[lane])->c->x[i]; }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            double s = c[r][n];
            for (int k = 0; k < A::cols; k++) s += a[r][k] * b[k][n];
            D::place(r, n, &lane, &i);
            ((const EmuMma<D, A, B> *)args[lane])->d->x[i] = (float)s;
        }
}
template <int M, int N, int K, class T, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    typedef fragment<accumulator, M, N, K, float> D;
    EmuMma<D, fragment<matrix_a, M, N, K, T, LA>, fragment<matrix_b, M, N, K, T, LB>> m{&d, &a, &b, &c};
    emu_warp_collective(EMU_WMMA_MMA, &m, emu_wmma_mma_all<D, fragment<matrix_a, M, N, K, T, LA>,
                                                           fragment<matrix_b, M, N, K, T, LB>>);
}
}   // namespace wmma
}   // namespace nvcuda
