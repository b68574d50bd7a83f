// router.h — token-choice top-k routing with GShard local-group capacity (design §2), and the
// routing family (docs/config.md, Routers and experts): noisy top-k, Switch (top-1; its jitter acts on the router input,
// see gating.c), GShard's random second expert, random token selection, expert choice,
// bias-balanced choosing and group-limited routing. Every router hands the dispatcher the same
// (token, expert, gate, slot) choices: expert choice uses E choice columns per token, one per
// expert, with slot −1 where the expert did not take the token.
// Groups are `group_tokens` consecutive tokens (group_size whole sequences); the last group
// of a batch may be shorter. Per group: C = max(min_capacity, ceil(cf·k·S/E)), C ≤ S;
// slots are taken choice-major, then in token order; a full expert drops the choice.
#pragma once
#include "config/config.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int E, k;
    float capacity_factor;   // <= 0: dropless
    int min_capacity;
    int group_tokens;
    // the routing family (docs/config.md); all zero = the §2 top-k router
    int kind;                 // ROUTER_* (config.h)
    int use_rts;              // capacity slots in a random token order per choice rank
    int no_renorm;            // topk, mixtral: the gates are the chosen probabilities as they are
    int num_groups, topk_groups;   // group-limited routing (0 or 1 group: off)
    float importance_coef, load_coef;   // noisy_topk losses
    const float *bias;        // [E] added to p for choosing only, or NULL
    float *noise;             // noisy_topk [N,E]: x·W_noise (read by forward and backward)
    float *dnoise;            // noisy_topk [N,E]: the backward writes d(x·W_noise)
    float *hval;              // noisy_topk [N,E]: the scores H the choice was made on
    float cv_scale;           // backward: the gradient scale of each group's noisy_topk losses
    // a GPU run: this forward's statistics stay on the device in summary (ROUTER_SUMMARY(E) doubles)
    // until dispatch_plan reads them back with its expert counts into summary_host (one copy per
    // MoE block); NULL: the router reads them back itself (a synchronisation)
    double *summary, *summary_host;
    // randomness: only when train; from (seed, step, layer, global sequence seq0 + t/T, position t%T)
    int train, generate, layer, T;
    unsigned long long seed;
    long step, seq0;
} RouterCfg;

// A §2 top-k router configuration (the routing family's fields zero)
#define RCFG(E_, k_, cf_, minc_, gt_) \
    ((RouterCfg){.E = (E_), .k = (k_), .capacity_factor = (cf_), .min_capacity = (minc_), .group_tokens = (gt_)})

typedef struct {
    double aux_sum;      // Σ over groups of l_aux = E·Σ_e f_e·P_e
    double z_sum;        // Σ over tokens of logsumexp(logits)²
    long groups, tokens;
    long choices, dropped;
    double cv_sum;       // Σ over groups of importance_coef·CV(importance)² + load_coef·CV(load)² (noisy_topk)
    long margins;        // tokens whose choice margin was taken (token-choice routers on the CPU)
    double min_margin;   // the smallest of those margins: the closest any choice came to a tie
} RouterStats;

// A GPU forward's summary (RouterCfg.summary): l_aux summed over the groups, Σ lse², the drops,
// then per expert the kept rows [E], the choices before dropping [E] (the step's loads, gating.c)
// and the dispatch plan's rows [E] (exp_rows).
enum { RS_AUX, RS_Z, RS_DROPPED, RS_KEPT };
#define ROUTER_SUMMARY(E) (RS_KEPT + 3 * (E))
#define RS_LOAD(E) (RS_KEPT + (E))
#define RS_ROWS(E) (RS_KEPT + 2 * (E))

// Choice columns per token: E for expert choice, else k.
static inline int router_columns(const RouterCfg *c) { return c->kind == ROUTER_EXPERT_CHOICE ? c->E : c->k; }

static inline int router_ngroups(long N, int group_tokens) { return (int)((N + group_tokens - 1) / group_tokens); }
// capacity of a group of S tokens
int router_capacity(const RouterCfg *c, long S);

// probs[N,E]: on entry the router logits (x·W, fp32); on exit softmax probabilities.
// lse[N] logsumexp of the logits. choice/gate/slot [N,k]: expert, gate value, slot in the
// (group, expert) buffer or -1 when dropped. fcount[ngroups,E]: f_e (fraction of choices
// before dropping); kept[ngroups,E]: slots used.
// The routing family dispatches from here; fcount is 0 for expert choice (no aux loss).
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

// noisy_topk: the probability that score e of one token stays in the top k when only its own
// noise is redrawn: Φ((clean_e − threshold)/std_e), threshold the k-th largest of the other
// scores h (the (k+1)-th of all when e is among the top k). h[E] noisy scores, clean[E], std[E].
double router_noisy_keep_prob(const float *h, const float *clean, const float *std, int E, int k, int e);
// The draws of the randomised routers, exposed for the statistics tests: the uniform u of
// token t (GShard's threshold, purpose 1; RTS priority of choice rank j, purpose 2 + j) and
// the standard normal of (t, e) (noisy_topk).
double router_uniform(const RouterCfg *c, int purpose, long t);
float router_normal(const RouterCfg *c, long t, int e);
// Switch's jitter of channel i of token t's router input: U(1−eps, 1+eps)
float router_jitter(const RouterCfg *c, float eps, long t, int i);
// The CUDA twins of router_forward / router_backward (src/cuda/moe.cu), on device buffers; st
// is a host pointer. The forward adds the counts (groups, tokens, choices) to st at once and
// leaves aux, z and the drops in c->summary for the host to add when the plan brings them back;
// without a summary it reads them back and adds them itself (this synchronises).
void cu_router_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount, int *kept,
                       long N, const RouterCfg *c, RouterStats *st);
void cu_router_backward(float *dlogits, const float *dgate, const float *probs, const float *lse, const int *choice,
                        const float *fcount, long N, const RouterCfg *c, float aux_scale, float z_scale);
#ifdef __cplusplus
}
#endif
