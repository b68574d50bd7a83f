// moe_state.h — what the MoE layer holds (moe/layer.h): the layer of a rank (MoeLayer), a
// block's tensors (MoeWeights) and its activations (MoeActs). The gating (gating.c) and the
// layer's flow (layer.c) both work on them, so the structs stand in a header of their own.
#pragma once
#include "config/config.h"
#include "moe/experts.h"
#include "moe/router.h"
#include "nn/params.h"
#include "parallel/comm.h"

struct RouteLog;   // moe/gating.h

// One block's MoE activations (views into the model's buffers); [N,·] rows are tokens.
typedef struct {
    float *probs, *lse, *gate, *fcount; // router [N,E] [N] [N,k] [G,E]
    int *choice, *slot, *row, *kept;    // [N,k] [N,k] [N,k] [G,E]
    long *start, *exp_rows;             // host: [G,E] first token-side row per (group, expert); [E] rows per expert
    long *scnt, *rcnt, *exp_off;        // host: the exchange plan (see dispatcher.h)
    float *xexp, *h, *hg;               // expert side [Rr,d] [Rr,mult·fe/tp] [Rr,fe/tp]
    float *sh_h, *sh_hg;                // shared expert [N,mult·fs/tp] [N,fs/tp]
    float *sh_y;                        // shared_expert_gate: the shared expert's TP-summed output before the gate [N,d]
    float *ysend;                       // expert outputs back on the token side [Rs,d]
} MoeActs;

// One block's MoE tensors: weights and their gradients (views into the registry).
typedef struct {
    int layer;
    int bias;                           // registry index of the balancing bias (-1: none)
    const float *router, *noise;        // [d,E] (llama: [E,d]); noisy_topk's noise weight or NULL
    float *grouter, *gnoise;
    const float *shg; float *gshg;      // shared_expert_gate [1,d] or NULL
    Experts experts;                    // the local experts
    Experts shared;                     // the shared expert (El 0: none)
} MoeWeights;

typedef struct MoeLayer {
    const ModelConfig *m;
    int d, E, El, k, fel, fsl, llama;
    const ExpertKind *kind;
    RouterCfg rcfg;                     // the router; group_tokens and the randomness set per forward
    Group *tp, *ep;
    int dtd, cac, overlap, progress_thread;   // moe.overlap_degree in `overlap`
    int uneven;                         // EP ranks may run different batch sizes: counts travel
    int rows16;                         // ln2, the experts' input rows (xexp) and their dy in bf16 (layer.c)
    int out16;                          // what the experts send back (y, d xexp) in bf16 (layer.c)
    long Rs, Rr;                        // expert-buffer rows at most: token side, expert side
    // the model's scratch: token side [Rs,d], expert side [Rr,d], the all-to-all's, [N,k], [N,E],
    // the largest hidden state, and two [N,d]: tmp (the shared expert's output) and dln's partner
    float *tok_buf, *exp_buf, *a2a_buf, *dgate, *dlogits_r, *dbig, *tmp;
    // randomness and training mode of the coming passes (routing.h): step (-1: not training), the
    // global index of the micro-batch's first sequence, its sequence length, the seed
    long rng_step, seq0;
    int T;
    unsigned long long seed;
    double *summary, *summary_host;     // a GPU run: one forward's router statistics and plan counts (router.h)
    RouterStats *stats;                 // the model's statistics, added to by every first pass
    struct RouteLog *log;               // per block: the step's loads, the bias, the log (gating.h)
    Registry *reg;                      // the balancing bias's tensor and its 16-bit storage
} MoeLayer;
