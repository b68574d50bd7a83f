// flat.c — a checkpoint's config.json: the model and moe keys flat with seq_len (and the
// sparse_attention section), as ted writes it (config_model_json) and reads it back, beside the
// Hugging Face keys io/hfconfig.c adds; a config.json of an earlier version, with ted's keys
// other than GPT-2's in a "ted" object, is read too.
#include "config/tables.h"
#include "core/alloc.h"
#include "core/json.h"
#include "core/util.h"
#include <string.h>

// The Hugging Face keys a checkpoint's config.json carries beside the flat keys (written by
// io/hfconfig.c): the reader of the flat keys passes over them.
// clang-format off
static const char *const hf_keys[] = {
    "model_type", "architectures", "n_ctx", "activation_function", "layer_norm_epsilon", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "initializer_range", "scale_attn_weights", "bos_token_id",
    "eos_token_id", "torch_dtype", "use_cache", "ted_note", "transformers_version",
    // Llama's and Mixtral's (docs/llama.md); tie_word_embeddings, rms_norm_eps, rope_theta are ted's keys too
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "max_position_embeddings", "hidden_act", "attention_bias", "attention_dropout", "pretraining_tp", "rope_scaling",
    "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits", "sliding_window",
    // Qwen2-MoE's (num_experts and qkv_bias are ted's keys too)
    "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
    "mlp_only_layers", "use_sliding_window", "max_window_layers", NULL
};
// clang-format on

static void hf_config_strip(cJSON *root) {
    for (int i = 0; hf_keys[i]; i++) cJSON_DeleteItemFromObjectCaseSensitive(root, hf_keys[i]);
}

// Moves the members of the CONFIG_TED_SECTION object to the top level (a config.json written
// before the section has them there already); -1 after one line on a clash or a wrong type.
static int unnest_ted_section(cJSON *root, const char *path) {
    cJSON *ted = cJSON_DetachItemFromObjectCaseSensitive(root, CONFIG_TED_SECTION);
    if (!ted) return 0;
    int rc = 0;
    if (!cJSON_IsObject(ted)) rc = config_type_error(path, CONFIG_TED_SECTION, "an object", ted);
    while (rc == 0 && ted->child) {
        cJSON *j = cJSON_DetachItemViaPointer(ted, ted->child);
        if (cJSON_GetObjectItemCaseSensitive(root, j->string)) {
            ted_error("%s: key \"%s\" is both in \"%s\" and at the top level", path, j->string, CONFIG_TED_SECTION);
            rc = -1;
        }
        cJSON_AddItemToObject(root, j->string, j);
    }
    cJSON_Delete(ted);
    return rc;
}

static int load_model_root(Config *c, cJSON *root, const char *path);

int config_load_model_json(Config *c, const char *path) {
    cJSON *root = config_parse_json_file(path);
    return root ? load_model_root(c, root, path) : -1;
}

int config_load_model_text(Config *c, const char *text, const char *path) {
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        ted_error("%s: the model keys are not a JSON object", path);
        cJSON_Delete(root);
        return -1;
    }
    return load_model_root(c, root, path);
}

// Takes root (deletes it); the model keys, checked as a checkpoint's.
static int load_model_root(Config *c, cJSON *root, const char *path) {
    const char *dup = json_duplicate_key(root);   // before the Hugging Face keys are passed over
    if (dup) ted_error("%s: key \"%.100s\" appears twice in one object", path, dup);
    if (dup || unnest_ted_section(root, path) != 0) {
        cJSON_Delete(root);
        return -1;
    }
    hf_config_strip(root);   // the Hugging Face keys a checkpoint's config.json carries too
    Config tmp = *c;
    sparse_config_defaults(&tmp.sparse);   // no section: dense
    config_arch_defaults(&tmp.model);      // no llama keys: a gpt2 checkpoint
    int rc = config_walk_file(&tmp, root, config_flat_keys, path);
    for (const JKey *k = config_flat_keys; rc == 0 && k < config_flat_keys + CONFIG_FLAT_REQUIRED; k++) {
        if (!cJSON_GetObjectItemCaseSensitive(root, k->name)) {
            ted_error("%s: missing key \"%s\"", path, k->name);
            rc = -1;
        }
    }
    cJSON_Delete(root);
    if (rc == 0) rc = config_validate_checkpoint_model(&tmp, path);   // the training config's rules
    if (rc == 0) {
        c->model = tmp.model;
        c->seq_len = tmp.seq_len;
        c->sparse = tmp.sparse;
    }
    return rc;
}

// The widths whose 0 stands for another key's value, written as the values they are.
static ModelConfig model_resolved(const ModelConfig *m) {
    ModelConfig r = *m;
    r.n_inner = cfg_ffn(m);
    r.expert_inner = cfg_expert_inner(m);
    r.n_kv_head = cfg_kv_heads(m);
    return r;
}

char *config_model_json(const Config *c) {
    const ModelConfig resolved = model_resolved(&c->model), *m = &resolved;
    size_t cap = 8192, len = 0;
    char *out = ted_alloc(cap, MEM_TEMP);
    char num[64];
    len += (size_t)snprintf(out + len, cap - len, "{\n");
#define PUT_INT(name, value) len += (size_t)snprintf(out + len, cap - len, "  \"%s\": %d,\n", name, value);
#define PUT_FLOAT(name, value)                                                                                         \
    config_format_float(num, sizeof num, value);                                                                       \
    len += (size_t)snprintf(out + len, cap - len, "  \"%s\": %s,\n", name, num);
#define PUT_J_INT(name) PUT_INT(#name, m->name)
#define PUT_J_FLOAT(name) PUT_FLOAT(#name, m->name)
#define PUT_STR(name, value) len += (size_t)snprintf(out + len, cap - len, "  \"%s\": %s,\n", name, value);
#define PUT_J_BOOL(name) PUT_STR(#name, m->name ? "true" : "false")
#define PUT_NAME(name, value) len += (size_t)snprintf(out + len, cap - len, "  \"%s\": \"%s\",\n", name, value);
#define PUT_J_ROUTER(name) PUT_NAME(#name, router_names[m->name])
#define PUT_J_ARCH(name) PUT_NAME(#name, arch_names[m->name])
#define PUT_J_EXPERT_TYPE(name) PUT_STR(#name, m->name == EXPERT_SWIGLU ? "\"swiglu\"" : "\"gelu\"")
#define PUT(name, kind) PUT_##kind(name)
    PUT_INT("vocab_size", m->vocab_size)
    PUT_INT("n_positions", m->n_positions)
    PUT_INT("n_embd", m->n_embd)
    PUT_INT("n_layer", m->n_layer)
    PUT_INT("n_head", m->n_head)
    PUT_INT("n_inner", m->n_inner)
    MOE_FIELDS(PUT)
    char sparse[4096];
    sparse_config_write(&c->sparse, c->seed, sparse, sizeof sparse);
    if (sparse[0]) len += (size_t)snprintf(out + len, cap - len, "  \"sparse_attention\": %s,\n", sparse);
    ROUTE_FIELDS(PUT)
    if (cfg_is_llama(m)) { ARCH_FIELDS(PUT) }   // a gpt2 checkpoint's config.json stays as it was
    len += (size_t)snprintf(out + len, cap - len, "  \"seq_len\": %d\n}\n", cfg_seq_len(c));
#undef PUT
#undef PUT_STR
#undef PUT_J_BOOL
#undef PUT_J_ROUTER
#undef PUT_J_ARCH
#undef PUT_NAME
#undef PUT_J_EXPERT_TYPE
#undef PUT_J_FLOAT
#undef PUT_J_INT
#undef PUT_FLOAT
#undef PUT_INT
    return out;
}
