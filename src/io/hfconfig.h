// hfconfig.h — a checkpoint's config.json: ted's model, moe and sparse_attention keys flat at the
// top level (design §7), plus what Hugging Face `transformers` needs to load a dense checkpoint as
// GPT2LMHeadModel (model_type "gpt2", the GPT-2 activation, LayerNorm epsilon, tied LM head).
// An MoE checkpoint says what it is instead (model_type "ted_moe"), which transformers refuses.
// Every key added here is on config/flat.c's list of keys that config_load_model_json passes over.
#pragma once
#include "config/config.h"

// model.arch llama (docs/llama.md): beside ted's keys, a dense model as LlamaForCausalLM, an MoE
// model in Mixtral's form as MixtralForCausalLM (keys of transformers v4.39), one with shared
// experts in Qwen2-MoE's form as Qwen2MoeForCausalLM (v4.40's keys; num_experts is ted's and
// Qwen2-MoE's), any other MoE llama as "ted_moe" with a note saying why.
// The config.json text (allocated through ted_alloc, MEM_TEMP).
char *hf_config_json(const Config *c);
// The generation_config.json beside it: the end-of-text token as transformers' bos and eos, and
// no sampling setting, so that transformers samples with its own defaults and does not take the
// MoE top_k at config.json's top level for sampling's top_k (allocated as hf_config_json's).
char *hf_generation_config_json(const Config *c);
// Why an MoE llama has no Hugging Face layout (one phrase), or NULL when it has (dense: Llama;
// MoE: Mixtral; with shared experts: Qwen2-MoE).
const char *hf_llama_layout(const ModelConfig *m);
// Qwen2-MoE's norm_topk_prob of ted's softmax top-k routers: the k probabilities renormalised (mixtral,
// and topk with k >= 2) or not (topk's top-1 gate is its probability; moe.topk_renorm false).
int hf_norm_topk_prob(const ModelConfig *m);
