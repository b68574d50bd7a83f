// hfconfig.h — a checkpoint's config.json: ted's flat model and moe keys (GPT-2's own names
// for the shape), plus what Hugging Face `transformers` needs to load a dense checkpoint as
// GPT2LMHeadModel (model_type "gpt2", the GPT-2 activation, LayerNorm epsilon, tied LM head).
// An MoE checkpoint says what it is instead (model_type "ted_moe"), which transformers refuses.
#pragma once
#include <cjson/cJSON.h>
#include "config.h"

// The config.json text (allocated through ted_alloc, MEM_TEMP).
char *hf_config_json(const Config *c);
// Removes the keys hf_config_json adds from a parsed config.json, so that the reader of the
// flat keys sees only those.
void hf_config_strip(cJSON *root);
