// moe_cuda.h — the CUDA twins of the dispatcher and the experts (src/cuda/moe.cu), with the
// arguments and semantics of their CPU functions (dispatcher.h, experts.h); the router's are
// in router.h.
#pragma once
#include "moe/router.h"
#ifdef __cplusplus
extern "C" {   // implemented in CUDA C++ (src/cuda)
#endif

// row, choice, slot, kept on the device; exp_rows on the host (start is the CPU's and unused):
// the only readback (with the router's summary when c->summary is set).
void cu_dispatch_plan(int *row, long *exp_rows, long *start, const int *choice, const int *slot, const int *kept,
                      long N, int k, const RouterCfg *c, int padded, int multiple);
void cu_dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d, int half);
void cu_dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d, int half);
void cu_combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d, int y16);
void cu_combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                         const int *row, long N, int k, int d, int half, int y16);
// Experts (experts.h) with the weights as one Experts struct of device pointers; off is host.
void cu_experts_forward(int El, int d, int f, const float *wfc, const float *bfc, const float *wproj,
                        const float *bproj, float *h, float *hg, float *y, const float *xin, int rows16,
                        int out16, const long *off, int proj_bias);
void cu_experts_backward(int El, int d, int f, const float *wfc, const float *wproj, float *gwfc, float *gbfc,
                         float *gwproj, float *gbproj, float *dxin, float *dhg, const float *dy, const float *xin,
                         int rows16, int out16, const float *h, const float *hg, const long *off, int proj_bias);

#ifdef __cplusplus
}
#endif
