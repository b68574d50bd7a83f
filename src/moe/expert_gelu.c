// expert_gelu.c — the expert kind of design: c_fc [d,f] + bias → GELU → c_proj [f,d] + bias,
// one GEMM per local expert over its block of rows, the GELU right after its expert's GEMM (the GPU
// runs the same as grouped GEMMs). One batched call over the experts does not pay on the CPU
// (oneDNN's batched matmul against this loop: docs/measured.md, bench/expert_gemm.c).
#include "core/backend.h"
#include "moe/experts.h"
#include "moe/moe_cuda.h"
#include "nn/ops.h"
#include <stddef.h>

static const ExpertTensor gelu_tensors[] = {
    {"c_fc.weight", 0, 2, 1, 0, 0, 1, 1, 1, INIT_NORMAL},     // [d, f] column-parallel
    {"c_fc.bias", 1, 1, 0, 1, 0, 0, 0, 1, INIT_ZERO},         // [f]
    {"c_proj.weight", 2, 2, 0, 1, 1, 0, 0, 1, INIT_RESIDUAL}, // [f, d] row-parallel
    {"c_proj.bias", 3, 1, 1, 0, 0, 0, -1, 1, INIT_ZERO},      // [d] replicated, added once
};

static void gelu_expert_forward(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off,
                                int proj_bias) {
    ON_GPU(cu_experts_forward(x->El, x->d, x->f, x->wfc, x->bfc, x->wproj, x->bproj, h, hg, y, xin, x->rows16,
                              x->out16, off, proj_bias));
    int d = x->d, f = x->f;
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        matmul_bias_gelu_forward(h + r0 * f, hg + r0 * f, xin + r0 * d, x->wfc + (long)e * d * f, x->bfc + (long)e * f,
                                 n, d, f);
        matmul_forward(y + r0 * d, hg + r0 * f, x->wproj + (long)e * f * d,
                       proj_bias ? x->bproj + (long)e * d : NULL, n, f, d, 0);
    }
}

static void gelu_expert_backward(const Experts *x, float *dxin, float *dhg, const float *dy, const float *xin,
                                 const float *h, const float *hg, const long *off, int proj_bias) {
    ON_GPU(cu_experts_backward(x->El, x->d, x->f, x->wfc, x->wproj, x->gwfc, x->gbfc, x->gwproj, x->gbproj, dxin, dhg,
                               dy, xin, x->rows16, x->out16, h, hg, off, proj_bias));
    int d = x->d, f = x->f;
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        matmul_backward(dhg + r0 * f, x->gwproj + (long)e * f * d, proj_bias ? x->gbproj + (long)e * d : NULL,
                        dy + r0 * d, hg + r0 * f, x->wproj + (long)e * f * d, n, f, d, 0);
        matmul_bias_gelu_backward(dxin + r0 * d, x->gwfc + (long)e * d * f, x->gbfc + (long)e * f, dhg + r0 * f,
                                  dhg + r0 * f, h + r0 * f, xin + r0 * d, x->wfc + (long)e * d * f, n, d, f);
    }
}

static double gelu_macs(double d, double f) { return 2 * d * f; }

const ExpertKind expert_gelu = {"gelu", 4, gelu_tensors, 1, gelu_expert_forward, gelu_expert_backward, gelu_macs};
