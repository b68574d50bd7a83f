// hf_import.h — reading a folder that Hugging Face transformers wrote (config.json +
// model.safetensors) as a starting point: its config.json, which lacks ted's own keys, turned
// into ted's model keys, and its tensor names matched to ted's. One row per architecture
// (model_type): today GPT-2, the layout ted's gpt2 model saves in. A folder ted saved itself
// (its config.json has ted's keys) is read by ckpt_meta as before.
#pragma once
#include "config/config.h"
#include "io/safetensors.h"

// 1 when the config.json at path was not written by ted (no moe_every, which ted writes at the
// top level and no transformers class has, and no "ted" object, where an earlier version kept it):
// a transformers folder for hf_import_config. 0 otherwise, also when it cannot be parsed
// (ted's reader then says why).
int hf_import_is_foreign(const char *path);
// The transformers config.json at path as ted's model keys in c->model (the rest at their
// defaults: a dense model) and c->seq_len (n_positions). Refuses, in one line naming the file
// and the key, a model_type ted has no row for and a setting whose forward ted does not compute
// (another activation or LayerNorm epsilon, an untied head, ...). 0 or -1.
int hf_import_config(const char *path, Config *c);
// Tensor `name` (ted's name) of f: under that name, or under the name a transformers base
// model (GPT2Model, no "transformer." prefix) gives it, or for a llama MoE tensor in Qwen2-MoE's
// names under its Mixtral-layout name (a checkpoint ted saved before those names). NULL when absent.
const float *hf_import_get(StFile *f, const char *name, int *ndim, int64_t shape[4]);
// A separate "lm_head.weight" (transformers' head) must equal the embedding (the tensor named
// `embedding`) a tied model ties it to: 0, or -1 after one line naming the file.
int hf_import_check_head(StFile *f, const char *file, const char *embedding);
