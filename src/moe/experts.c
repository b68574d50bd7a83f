// experts.c — the expert registry and the batched pass over the local experts (see experts.h).
#include "moe/experts.h"
#include <stdio.h>

const ExpertKind *expert_kind(int type) { return type == EXPERT_SWIGLU ? &expert_swiglu : &expert_gelu; }
const ExpertKind *expert_kind_of(const ModelConfig *m) {
    if (cfg_is_llama(m) && m->expert_type == EXPERT_SWIGLU) return cfg_qwen_layout(m) ? &expert_qwen2_moe : &expert_mixtral;
    return expert_kind(m->expert_type);
}

long expert_tensor_rows(const ExpertTensor *t, long d, long f) { return t->rd * d + t->rf * f; }
long expert_tensor_cols(const ExpertTensor *t, long d, long f) { return t->ndim < 2 ? 1 : t->cd * d + t->cf * f; }

void experts_forward(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off,
                     int proj_bias) {
    const ExpertKind *k = x->kind ? x->kind : &expert_gelu;
    k->forward(x, h, hg, y, xin, off, proj_bias);
}

void experts_backward(const Experts *x, float *dxin, float *dh, const float *dy, const float *xin,
                      const float *h, const float *hg, const long *off, int proj_bias) {
    const ExpertKind *k = x->kind ? x->kind : &expert_gelu;
    k->backward(x, dxin, dh, dy, xin, h, hg, off, proj_bias);
}

void experts_register(Registry *r, const ExpertKind *k, const char *block, int e0, int El, int shared, long d, long f,
                      float std, float pstd, int first[4]) {
    for (int s = 0; s < 4; s++) first[s] = -1;
    for (int t = 0; t < k->ntensors; t++) {
        const ExpertTensor *x = &k->tensors[t];
        float sd = x->init == INIT_NORMAL ? std : x->init == INIT_RESIDUAL ? pstd : 0;
        for (int e = e0; e < e0 + El; e++) {
            char n[128];
            if (shared) snprintf(n, sizeof n, "%s.shared_expert.%s", block, x->suffix);
            else snprintf(n, sizeof n, "%s.experts.%d.%s", block, e, x->suffix);
            int i = reg_add(r, n, x->ndim, expert_tensor_rows(x, d, f), expert_tensor_cols(x, d, f), x->split_dim,
                            x->parts, shared ? TAG_DP : TAG_EDP, sd, 0);
            if (e == e0) first[x->slot] = i;
        }
    }
}
