// hfconfig.h — a checkpoint's config.json: GPT-2's own shape keys at the top level, ted's other
// model, moe and sparse_attention keys in a "ted" object (so that none is taken by transformers
// as one of its config or generation keys), plus what Hugging Face `transformers` needs to load a dense checkpoint as
// GPT2LMHeadModel (model_type "gpt2", the GPT-2 activation, LayerNorm epsilon, tied LM head).
// An MoE checkpoint says what it is instead (model_type "ted_moe"), which transformers refuses.
// Every key added here is on config.c's list of keys that config_load_model_json passes over.
#pragma once
#include "config/config.h"

// The config.json text (allocated through ted_alloc, MEM_TEMP).
char *hf_config_json(const Config *c);
