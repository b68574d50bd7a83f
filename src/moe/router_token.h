// router_token.h — the router backward of one token, shared by the CPU (router.c) and the GPU
// (cuda/moe.cu, one thread per token): the same code, so the two cannot drift apart.
#pragma once
#ifdef __CUDACC__
#define TED_HOST_DEVICE __host__ __device__
#else
#define TED_HOST_DEVICE
#endif

// dl[E] (written): the logit gradient of one token from its probabilities p[E], its choices
// ch[k] and their gate gradients dg[k], f[E] its group's choice counts (aux loss over a group of
// S tokens) and lse its logsumexp (z loss). renorm1: a single choice's gate is renormalised too
// (Mixtral's router: the gate is 1, no gradient reaches p through it); ROUTER_RENORM_NONE: no gate
// is (each is its probability: topk_renorm false).
#define ROUTER_RENORM_NONE 2
static inline TED_HOST_DEVICE void router_backward_token(float *dl, const float *p, const float *f, const int *ch,
                                                         const float *dg, float lse, int E, int k, long S,
                                                         float aux_scale, float z_scale, int renorm1) {
    for (int e = 0; e < E; e++) dl[e] = aux_scale * E * f[e] / (float)S;   // first dprobs, then dlogits
    if ((k == 1 && !renorm1) || renorm1 == ROUTER_RENORM_NONE)
        for (int j = 0; j < k; j++) dl[ch[j]] += dg[j];
    else {   // gates renormalised over the k chosen probabilities
        float sum = 0, dot = 0;
        for (int j = 0; j < k; j++) sum += p[ch[j]];
        for (int j = 0; j < k; j++) dot += dg[j] * p[ch[j]] / sum;
        for (int j = 0; j < k; j++) dl[ch[j]] += (dg[j] - dot) / sum;
    }
    float s = 0;   // through the softmax, plus the z-loss term
    for (int e = 0; e < E; e++) s += p[e] * dl[e];
    float zg = z_scale * 2.0f * lse;
    for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - s) + zg * p[e];
}
