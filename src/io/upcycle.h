// upcycle.h — a dense checkpoint grown into a Mixture of Experts whose first forward equals the
// dense model's (Komatsuzaki et al.'s sparse upcycling; with granularity, Megatron-Core's granular
// upcycling). Every MoE block's experts come from that block's dense FFN:
//   granularity G: the FFN's inner dimension f cut into G slices of f/G; E = G x copies experts,
//   expert c·G + j = slice j (c_fc columns, c_fc bias, c_proj rows x G, c_proj bias as is);
//   router [d, E]: column c·G + j = column c of an N(0, 0.02) matrix [d, E/G] from (seed, its name),
//   so a token's G slices of one copy score alike and are chosen together;
//   top_k = K·G, router topk (softmax, top-k renormalised; or noisy_topk when G = 1), dropless.
// With gates renormalised over the K·G chosen slices, each copy's G slices share p_c/(G·Σp), and
// the G x scale of c_proj gives Σ_chosen g·expert = dense FFN exactly (up to float rounding).
// The tensors are matched by name pattern (upcycle.c's table), not by a fixed model.
#pragma once
#include <stdint.h>

typedef struct {
    const char *load, *save;   // dense checkpoint (ted's, or a transformers GPT-2 folder); new folder
    int experts, top_k, granularity, moe_every;   // E, K (0: min(2, E/G)), G, every N-th block MoE
    const char *router;        // "topk", or "noisy_topk" with G = 1: the kinds whose equality holds
    uint64_t seed;             // the router's initial weights
} UpcycleOpts;

typedef struct { char dense[1200]; int copies, top_k, expert_inner, moe_blocks; long params; } UpcycleResult;

// Checks the options and the dense checkpoint (names, shapes, finiteness), writes o->save
// (model.safetensors and config.json, no optimizer state) through a temporary folder renamed
// into place; o->save must not exist. One process. 0, or -1 after one line, nothing written.
int upcycle_run(const UpcycleOpts *o, UpcycleResult *res);
