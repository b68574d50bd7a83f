// llama.h — the pieces of a `llama` block (docs/llama.md) that differ from GPT-2's:
// its tensors under Hugging Face Llama/Mixtral names in nn.Linear's [out, in] layout, RMSNorm,
// rotary q and k with grouped-query attention, the SwiGLU FFN and the untied head. model.c runs
// the block around them: the TP all-reduces, attention itself, the MoE FFN, checkpointing.
#pragma once
#include "model/model_state.h"

// Registers block l's tensors (attention, norms, dense FFN or the MoE router and experts).
void llama_add_block(Model *M, int l);
// The rotary table [T, hd] of the built T (M->rope).
void llama_build(Model *M);
// What llama_build allocates (the rotary table [T, hd]), for model_size; 0 for gpt2.
size_t llama_act_bytes(const Model *M);
// RMSNorm with the model's eps (weight only; the bias index is -1).
void llama_norm_forward(Model *M, float *out, float *rstd, const float *in, int w, long N);
void llama_norm_backward(Model *M, float *dinp, const float *dout, const float *in, int w, const float *rstd, long N);
// x->ln1 → x->qkv [N,3·Dl]: q, k, v projections, rotary q and k, kv heads repeated to the query heads.
void llama_qkv_forward(Model *M, int l, int B, int T);
// M->dqkv (attention's gradient) → M->dln = d(ln1) (this rank's part, before the TP sum).
void llama_qkv_backward(Model *M, int l, int B, int T);
// out[N,d] (row-parallel part) = x->atty · o_projᵀ; and its backward into M->datty.
void llama_out_forward(Model *M, int l, float *out, long N);
void llama_out_backward(Model *M, int l, long N);
// Dense FFN: x->ln2 → x->fch [N,2fl] (gate | up) → x->fchg → out[N,d] (row-parallel part); the
// backward from M->dres into M->dln (before the TP sum). hidden_only: stop at fchg (a CAC recompute).
void llama_ffn_forward(Model *M, int l, float *out, long N, int hidden_only);
void llama_ffn_backward(Model *M, int l, long N);
// Parameters of a llama model, and the matmul parameters a token meets in its attention and dense FFN.
long llama_num_params(const ModelConfig *m);
double llama_attn_macs(const ModelConfig *m);
