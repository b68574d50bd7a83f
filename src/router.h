// router.h — token-choice top-k routing with GShard local-group capacity (design §2).
// Groups are `group_tokens` consecutive tokens (group_size whole sequences); the last group
// of a batch may be shorter. Per group: C = max(min_capacity, ceil(cf·k·S/E)), C ≤ S;
// slots are taken choice-major, then in token order; a full expert drops the choice.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int E, k;
    float capacity_factor;   // <= 0: dropless
    int min_capacity;
    int group_tokens;
} RouterCfg;

typedef struct {
    double aux_sum;      // Σ over groups of l_aux = E·Σ_e f_e·P_e
    double z_sum;        // Σ over tokens of logsumexp(logits)²
    long groups, tokens;
    long choices, dropped;
} RouterStats;

static inline int router_ngroups(long N, int group_tokens) { return (int)((N + group_tokens - 1) / group_tokens); }
// capacity of a group of S tokens
int router_capacity(const RouterCfg *c, long S);

// probs[N,E]: on entry the router logits (x·W, fp32); on exit softmax probabilities.
// lse[N] logsumexp of the logits. choice/gate/slot [N,k]: expert, gate value, slot in the
// (group, expert) buffer or -1 when dropped. fcount[ngroups,E]: f_e (fraction of choices
// before dropping); kept[ngroups,E]: slots used.
void router_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount,
                    int *kept, long N, const RouterCfg *c, RouterStats *st);

// Adds a batch's z term (Σ lse², lse a host array) and its counts to st (aux and drops are per
// group, added by the caller). Shared by the CPU and the GPU router.
void router_stats_batch(RouterStats *st, const float *lse, long N, int G, int k);

// dlogits[N,E] (written) from dgate[N,k] (gate gradients, 0 for dropped choices) plus the
// aux loss (scaled by aux_scale per group) and the z-loss (z_scale per token).
void router_backward(float *dlogits, const float *dgate, const float *probs, const float *lse,
                     const int *choice, const float *fcount, long N, const RouterCfg *c,
                     float aux_scale, float z_scale);
#ifdef __cplusplus
}
#endif
