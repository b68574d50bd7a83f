// params.h — the parameter registry. Each tensor has its Hugging Face GPT-2 name, its full
// shape, the slice this rank owns (TP split and expert ownership), and a sync tag that says
// which data-parallel group averages its gradient (FastMoE's idea). Optimizer, clipping,
// checkpoints and gradient sync all walk this list. Weights live in one flat buffer and
// gradients in another; each Param holds views into them.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/precision.h"

typedef enum { TAG_DP, TAG_EDP } SyncTag;   // non-expert → DP group; expert → expert-DP group

typedef struct {
    char name[96];
    int ndim;
    long shape[2];      // full shape, HF layout (Conv1D weights are [in, out]); wte padded to Vp rows
    long save_rows;     // rows that are real (checkpoints hold these): shape[0] except for padded wte
    int split_dim;      // dimension split over TP, or -1 (replicated over TP)
    int split_parts;    // the split dim is `parts` equal blocks each split over TP (c_attn: q|k|v → 3)
    long lshape[2];     // this rank's shape
    long numel;         // this rank's element count
    SyncTag tag;
    int decay;          // weight decay applies (ndim >= 2)
    int tied_copy;      // the second copy of a tied tensor (the last pipeline stage's wte): its gradient
                        // is the first copy's, so it is left out of the norm and of checkpoints
    int layer, expert;  // an expert's tensor: its block and global expert index (expert −1 otherwise)
    char suffix[24];    // an expert's tensor: the name after "experts.{e}." (c_fc.weight, …)
    float init_std;     // N(0, std); std 0 → constant init_val
    float init_val;
    size_t off;         // offset in the flat buffers
    float *w, *g;       // fp32 views: weights (16-bit storage: the staging buffer, see model.c), gradients
                        // (16-bit gradients: the staging buffer)
    uint16_t *w16, *g16; // 16-bit storage (bf16 or fp16): views into the flat 16-bit buffers
} Param;

typedef struct {
    Param *p;
    int n, cap;
    long total;         // local elements over all params
    float *w, *g;       // flat fp32 buffers (MEM_PARAMS, MEM_GRADS), or NULL with 16-bit storage
    uint16_t *w16, *g16; // flat 16-bit buffers when half != 0 (weights), ghalf != 0 (gradients)
    // On a GPU run the flat buffers are device memory and the weights have a host copy (the
    // same pointers on the CPU). Initialisation and checkpoints work on the host view.
    float *host_w; uint16_t *host_w16;
    Precision half;     // weight storage: PREC_FP32, PREC_BF16 or PREC_FP16
    // gradient storage: PREC_FP32, else as half. A GPU --bf16 run keeps bf16 weights, which the ops
    // read directly, and fp32 gradients, which they accumulate into (the GPU mixed-precision
    // contract, docs/gpus.md); the CPU's 16-bit runs keep both in 16 bits and compute on fp32
    // copies of a block at a time (model.c's staging).
    Precision ghalf;
    int tp, tp_idx;     // the TP slice this registry holds
    // ZeRO stage 2: no flat gradient buffer is made (grads_external); the optimizer points the
    // gradient views into its buckets and the backward calls grads_ready(ctx, i0, i1) when the
    // gradients of params [i0, i1) are complete for the micro-batch (see zero.h).
    int grads_external;
    void (*grads_ready)(void *ctx, int i0, int i1);
    void *grads_ctx;
    // zero_optimization.overlap_comm: the forward calls weights_needed(ctx, i0, i1) before it reads
    // the weights of params [i0, i1), whose all-gathers may still be in flight (see zero_overlap.h).
    void (*weights_needed)(void *ctx, int i0, int i1);
    void *weights_ctx;
} Registry;

void reg_init(Registry *r, int cap, int tp, int tp_idx);
// Adds a tensor; returns its index. Shapes are full shapes; the local shape follows split_dim.
int reg_add(Registry *r, const char *name, int ndim, long d0, long d1, int split_dim, int parts,
            SyncTag tag, float std, float val);
// Allocates the flat buffers — weights fp32, or 16-bit when half is PREC_BF16 / PREC_FP16;
// gradients likewise by ghalf (PREC_FP32 or half) — and points every Param into them.
void reg_alloc(Registry *r, Precision half, Precision ghalf);
// The weights of param i as the ops take them: the fp32 view, or with 16-bit weights and fp32
// gradients (a GPU --bf16 run) the 16-bit weights themselves, handed through the ops' float
// pointers: the GPU ops read every weight as bf16 on such a run (core/device.h, cu_init).
static inline float *reg_op_weights(const Registry *r, int i) {
    return r->half && !r->ghalf ? (float *)(void *)r->p[i].w16 : r->p[i].w;
}
// Host view: Param weight views point at the host copy (copy: after downloading the run's
// weights into it). Device view: back to the run buffers (copy: after uploading the host copy).
// On the CPU both copies are no-ops.
void reg_host_view(Registry *r, int copy);
void reg_device_view(Registry *r, int copy);
// Initial weights (into the current view): element i of the full tensor gets N(0, std) from (seed, name, i).
void reg_init_weights(Registry *r, uint64_t seed);
int reg_find(const Registry *r, const char *name);
// The name of parameter p for global expert e (p itself when p is not an expert's tensor).
void param_name_for_expert(const Param *p, int e, char *out, size_t len);
// Full-tensor index of local element i (row-major local → row-major full).
long param_full_index(const Registry *r, const Param *p, long i);
void reg_free(Registry *r);
