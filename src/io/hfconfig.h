// hfconfig.h — a checkpoint's config.json: GPT-2's own shape keys at the top level, ted's other
// model, moe and sparse_attention keys in a "ted" object (so that none is taken by transformers
// as one of its config or generation keys), plus what Hugging Face `transformers` needs to load a dense checkpoint as
// GPT2LMHeadModel (model_type "gpt2", the GPT-2 activation, LayerNorm epsilon, tied LM head).
// An MoE checkpoint says what it is instead (model_type "ted_moe"), which transformers refuses.
// Every key added here is on config.c's list of keys that config_load_model_json passes over.
#pragma once
#include "config/config.h"

// model.arch llama (docs/llama.md): Llama's shared keys (vocab_size, rms_norm_eps, rope_theta,
// tie_word_embeddings) at the top level and the rest of ted's in "ted"; a dense model as
// LlamaForCausalLM, an MoE model in Mixtral's form as MixtralForCausalLM (keys of transformers v4.39),
// one with shared experts in Qwen2-MoE's form as Qwen2MoeForCausalLM (v4.40's keys; num_experts then at
// the top level too), any other MoE llama as "ted_moe" with a note saying why.
// The config.json text (allocated through ted_alloc, MEM_TEMP).
char *hf_config_json(const Config *c);
// Why an MoE llama has no Hugging Face layout (one phrase), or NULL when it has (dense: Llama;
// MoE: Mixtral; with shared experts: Qwen2-MoE).
const char *hf_llama_layout(const ModelConfig *m);
// Qwen2-MoE's norm_topk_prob of ted's softmax top-k routers: the k probabilities renormalised (mixtral,
// and topk with k >= 2) or not (topk's top-1 gate is its probability; moe.topk_renorm false).
int hf_norm_topk_prob(const ModelConfig *m);
