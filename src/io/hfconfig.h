// hfconfig.h — a checkpoint's config.json: ted's flat model and moe keys (GPT-2's own names
// for the shape), plus what Hugging Face `transformers` needs to load a dense checkpoint as
// GPT2LMHeadModel (model_type "gpt2", the GPT-2 activation, LayerNorm epsilon, tied LM head).
// An MoE checkpoint says what it is instead (model_type "ted_moe"), which transformers refuses.
// Every key added here is on config.c's list of keys that config_load_model_json passes over.
#pragma once
#include "config/config.h"

// The config.json text (allocated through ted_alloc, MEM_TEMP).
char *hf_config_json(const Config *c);
