// hfconfig.c — Hugging Face keys in a checkpoint's config.json (see hfconfig.h).
#include "io/hfconfig.h"
#include "core/alloc.h"
#include <cjson/cJSON.h>
#include <string.h>

// GPT-2's forward as ted computes it: tanh GELU, LayerNorm eps 1e-5, no dropout, the LM head
// is wte (tied), linear weights in the Conv1D [in, out] layout under GPT-2's names.
static void add_gpt2(cJSON *o, const ModelConfig *m) {
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON *a = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddNumberToObject(o, "n_ctx", m->n_positions);
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(o, "resid_pdrop", 0);
    cJSON_AddNumberToObject(o, "embd_pdrop", 0);
    cJSON_AddNumberToObject(o, "attn_pdrop", 0);
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    cJSON_AddTrueToObject(o, "scale_attn_weights");
    cJSON_AddTrueToObject(o, "tie_word_embeddings");
    int eot = m->vocab_size > 50256 ? 50256 : m->vocab_size - 1;
    cJSON_AddNumberToObject(o, "bos_token_id", eot);
    cJSON_AddNumberToObject(o, "eos_token_id", eot);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
}

// GPT-2's own config keys, which ted's model keys share in name and meaning: they stay at the
// top level. Every other ted key goes into the "ted" object, so that none of them is read by
// transformers as a config or generation setting of its own (the MoE top_k as sampling's top_k).
static const char *const gpt2_keys[] = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", NULL};

static int is_gpt2_key(const char *k) {
    for (int i = 0; gpt2_keys[i]; i++)
        if (strcmp(gpt2_keys[i], k) == 0) return 1;
    return 0;
}

// The flat keys of config_model_json, the ted-only ones moved into "ted".
static cJSON *namespaced(const Config *c) {
    char *flat = config_model_json(c);
    cJSON *src = cJSON_Parse(flat);
    ted_free(flat);
    cJSON *o = cJSON_CreateObject(), *ted = cJSON_CreateObject();
    while (src->child) {
        cJSON *j = cJSON_DetachItemViaPointer(src, src->child);
        cJSON_AddItemToObject(is_gpt2_key(j->string) ? o : ted, j->string, j);
    }
    cJSON_Delete(src);
    cJSON_AddItemToObject(o, CONFIG_TED_SECTION, ted);
    return o;
}

char *hf_config_json(const Config *c) {
    cJSON *o = namespaced(c);
    const ModelConfig *m = &c->model;
    if (m->num_experts == 1) add_gpt2(o, m);
    else {
        cJSON_AddStringToObject(o, "model_type", "ted_moe");
        cJSON_AddStringToObject(o, "ted_note", "a Mixture-of-Experts GPT (ted.num_experts experts, ted.top_k chosen per token, "
                                               "an MoE FFN in every ted.moe_every-th block) in GPT-2's layout; the expert FFNs are "
                                               "transformer.h.N.mlp.experts.E.*; ted eval and ted generate load it, "
                                               "transformers' GPT2LMHeadModel cannot");
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    size_t n = strlen(text);
    char *out = ted_alloc(n + 2, MEM_TEMP);
    memcpy(out, text, n);
    out[n] = '\n';
    out[n + 1] = 0;
    cJSON_free(text);
    return out;
}
