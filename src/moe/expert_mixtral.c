// expert_mixtral.c — the swiglu expert in Mixtral's layout (docs/llama.md), the kind of llama's
// experts: w1 [f, d] (gate), w3 [f, d] (up), w2 [d, f] (down), torch.nn.Linear's [out, in], no
// biases; down(silu(gate(x))·up(x)). The same function as expert_swiglu.c's c_fc = w1ᵀ | w3ᵀ,
// c_proj = w2ᵀ. Under TP w1 and w3 split by rows, w2 by columns. w3 fills the Experts view
// slot 1 (gelu's bias slot: this kind has no biases). expert_qwen2_moe is the same expert under
// Qwen2-MoE's names (a llama MoE with shared experts, config.h cfg_qwen_layout).
#include "moe/experts.h"
#include "nn/linear.h"
#include "nn/swiglu.h"
#include <stddef.h>

static const ExpertTensor mixtral_tensors[] = {
    {"w1.weight", 0, 2, 0, 1, 1, 0, 0, 1, INIT_NORMAL},     // [f, d] gate, column-parallel
    {"w3.weight", 1, 2, 0, 1, 1, 0, 0, 1, INIT_NORMAL},     // [f, d] up, column-parallel
    {"w2.weight", 2, 2, 1, 0, 0, 1, 1, 1, INIT_RESIDUAL},   // [d, f] down, row-parallel
};

// h[R,2f] = gate | up, hg[R,f] = silu(gate)·up, y[R,d] = hg·w2ᵀ
static void mixtral_forward(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off,
                            int proj_bias) {
    int d = x->d, f = x->f;
    long fd = (long)f * d;
    (void)proj_bias;
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        linear_forward(h + r0 * 2 * f, 2 * f, xin + r0 * d, d, x->wfc + e * fd, n, d, f, 0);
        linear_forward(h + r0 * 2 * f + f, 2 * f, xin + r0 * d, d, x->bfc + e * fd, n, d, f, 0);
    }
    swiglu_forward(hg, h, off[x->El], f);
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        linear_forward(y + r0 * d, d, hg + r0 * f, f, x->wproj + e * fd, n, f, d, 0);
    }
}

// dy is read whole (first loop) before dxin, which may alias it, is written
static void mixtral_backward(const Experts *x, float *dxin, float *dh, const float *dy, const float *xin,
                             const float *h, const float *hg, const long *off, int proj_bias) {
    int d = x->d, f = x->f;
    long fd = (long)f * d;
    (void)proj_bias;
    for (int e = 0; e < x->El; e++) {   // d hg [R,f] into the front of dh
        long r0 = off[e], n = off[e + 1] - off[e];
        linear_backward(dh + r0 * f, f, x->gwproj + e * fd, dy + r0 * d, d, hg + r0 * f, f, x->wproj + e * fd, n, f, d,
                        0);
    }
    swiglu_backward(dh, h, off[x->El], f);
    for (int e = 0; e < x->El; e++) {
        long r0 = off[e], n = off[e + 1] - off[e];
        const float *dg = dh + r0 * 2 * f, *in = xin + r0 * d;
        linear_backward(dxin + r0 * d, d, x->gwfc + e * fd, dg, 2 * f, in, d, x->wfc + e * fd, n, d, f, 0);
        linear_backward(dxin + r0 * d, d, x->gbfc + e * fd, dg + f, 2 * f, in, d, x->bfc + e * fd, n, d, f, 1);
    }
}

static double mixtral_macs(double d, double f) { return 3 * d * f; }

const ExpertKind expert_mixtral = {"mixtral", 3, mixtral_tensors, 2, mixtral_forward, mixtral_backward, mixtral_macs};

// The same expert under Qwen2-MoE's names (Qwen2MoeMLP: gate_proj, up_proj, down_proj).
static const ExpertTensor qwen_tensors[] = {
    {"gate_proj.weight", 0, 2, 0, 1, 1, 0, 0, 1, INIT_NORMAL},
    {"up_proj.weight", 1, 2, 0, 1, 1, 0, 0, 1, INIT_NORMAL},
    {"down_proj.weight", 2, 2, 1, 0, 0, 1, 1, 1, INIT_RESIDUAL},
};

const ExpertKind expert_qwen2_moe = {"qwen2_moe", 3, qwen_tensors, 2, mixtral_forward, mixtral_backward, mixtral_macs};
