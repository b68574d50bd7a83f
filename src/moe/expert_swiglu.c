// expert_swiglu.c — the SwiGLU expert kind (design): c_fc [d, 2f] = gate | up (no bias),
// silu(gate)·up, c_proj [f, d] (no bias). Under TP c_fc splits as two blocks (each rank holds
// its share of gate and of up), c_proj by rows, as a dense FFN.
#include "moe/experts.h"
#include "nn/ops.h"
#include "nn/swiglu.h"
#include <math.h>
#include <stddef.h>

static const ExpertTensor swiglu_tensors[] = {
    {"c_fc.weight", 0, 2, 1, 0, 0, 2, 1, 2, INIT_NORMAL},     // [d, 2f]: gate | up, column-parallel
    {"c_proj.weight", 2, 2, 0, 1, 1, 0, 0, 1, INIT_RESIDUAL}, // [f, d] row-parallel
};

static void swiglu_experts_forward(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off,
                           int proj_bias) {
    int d = x->d, f = x->f;
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        matmul_forward(h + r0 * 2 * f, xin + r0 * d, x->wfc + (long)e * d * 2 * f, NULL, n, d, 2 * f, 0);
    }
    swiglu_forward(hg, h, off[x->El], f);
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        matmul_forward(y + r0 * d, hg + r0 * f, x->wproj + (long)e * f * d, NULL, n, f, d, 0);
    }
}

static void swiglu_experts_backward(const Experts *x, float *dxin, float *dh, const float *dy, const float *xin,
                            const float *h, const float *hg, const long *off, int proj_bias) {
    int d = x->d, f = x->f;
    for (int e = 0; e < x->El; e++) {   // d hg [R,f] into the front of dh
        long r0 = off[e], n = off[e + 1] - off[e];
        matmul_backward(dh + r0 * f, x->gwproj + (long)e * f * d, NULL, dy + r0 * d, hg + r0 * f,
                        x->wproj + (long)e * f * d, n, f, d, 0);
    }
    swiglu_backward(dh, h, off[x->El], f);
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        matmul_backward(dxin + r0 * d, x->gwfc + (long)e * d * 2 * f, NULL, dh + r0 * 2 * f, xin + r0 * d,
                        x->wfc + (long)e * d * 2 * f, n, d, 2 * f, 0);
    }
}

static double swiglu_macs(double d, double f) { return 3 * d * f; }

const ExpertKind expert_swiglu = {"swiglu", 2, swiglu_tensors, 2, swiglu_experts_forward, swiglu_experts_backward, swiglu_macs};
