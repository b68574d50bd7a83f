// hf_import.c — a transformers folder as a starting point (see hf_import.h).
#include "io/hf_import.h"
#include "core/alloc.h"
#include "core/json.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

static cJSON *parse(const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    cJSON *j = cJSON_Parse(text);
    ted_free(text);
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); return NULL; }
    return j;
}

int hf_import_is_foreign(const char *path) {
    cJSON *j = parse(path);
    const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "model_type") : NULL;
    int qwen = cJSON_IsString(t) && !strcmp(t->valuestring, "qwen2_moe");   // its num_experts is transformers' key
    int foreign = j && !cJSON_GetObjectItemCaseSensitive(j, CONFIG_TED_SECTION) &&
                  (qwen || !cJSON_GetObjectItemCaseSensitive(j, "num_experts"));
    cJSON_Delete(j);
    return foreign;
}

// A number key (absent: deflt; JSON null: null_val); -1 after one line when not a number.
static int num(const char *path, const cJSON *j, const char *key, double deflt, double null_val, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    *out = !v ? deflt : cJSON_IsNull(v) ? null_val : cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (isnan(*out)) { ted_error("%s: \"%s\" must be a number", path, key); return -1; }
    return 0;
}

static int flag(const cJSON *j, const char *key, int deflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : deflt;
}

// The type of each non-number key ted reads: 'b' a bool, 's' a string, 'a' an array, 'w' a number or
// null. A key present with another type is refused, never read as its default ("true" is not true,
// 1 is not a bool). Number keys are num()'s.
static const struct { const char *key; char type; } typed[] = {
    {"model_type", 's'}, {"activation_function", 's'}, {"hidden_act", 's'}, {"scale_attn_weights", 'b'},
    {"scale_attn_by_inverse_layer_idx", 'b'}, {"tie_word_embeddings", 'b'}, {"add_cross_attention", 'b'},
    {"attention_bias", 'b'}, {"use_sliding_window", 'b'}, {"norm_topk_prob", 'b'}, {"qkv_bias", 'b'},
    {"mlp_only_layers", 'a'}, {"sliding_window", 'w'}};

static int check_types(const char *path, const cJSON *j) {
    static const char *const want[] = {"a bool (true or false)", "a string", "an array", "a number or null"};
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, typed[i].key);
        char t = typed[i].type;
        if (!v || (t == 'b' && cJSON_IsBool(v)) || (t == 's' && cJSON_IsString(v)) || (t == 'a' && cJSON_IsArray(v)) ||
            (t == 'w' && (cJSON_IsNumber(v) || cJSON_IsNull(v))))
            continue;
        ted_error("%s: \"%s\" must be %s", path, typed[i].key, want[strchr("bsaw", t) - "bsaw"]);
        return -1;
    }
    return 0;
}

// GPT-2 (transformers' GPT2Config, its defaults where a key is absent): the keys that change
// the forward must be the ones ted computes; dropout keys are training choices (ted has none).
static int gpt2_forward(const char *path, const cJSON *j) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    const char *act = cJSON_IsString(a) ? a->valuestring : "gelu_new";
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_fast")) {
        ted_error("%s: activation_function \"%.40s\" is not the tanh GELU ted computes (gelu_new)", path, act);
        return -1;
    }
    double eps;
    if (num(path, j, "layer_norm_epsilon", 1e-5, 1e-5, &eps)) return -1;
    if (fabs(eps - 1e-5) > 1e-12) { ted_error("%s: layer_norm_epsilon %g, ted's LayerNorm has 1e-05", path, eps); return -1; }
    const char *bad = !flag(j, "scale_attn_weights", 1) ? "scale_attn_weights false (ted scales by 1/sqrt(head size))"
                    : flag(j, "scale_attn_by_inverse_layer_idx", 0) ? "scale_attn_by_inverse_layer_idx true"
                    : !flag(j, "tie_word_embeddings", 1) ? "tie_word_embeddings false (ted ties the head to wte)"
                    : flag(j, "add_cross_attention", 0) ? "add_cross_attention true" : NULL;
    if (bad) { ted_error("%s: %s: not a model ted computes", path, bad); return -1; }
    return 0;
}

static int gpt2_config(const char *path, const cJSON *j, Config *c) {
    if (gpt2_forward(path, j)) return -1;
    static const char *const keys[] = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner"};
    static const double deflt[] = {50257, 1024, 768, 12, 12, 0};
    double v[6];
    for (int i = 0; i < 6; i++) {
        if (num(path, j, keys[i], deflt[i], 0, &v[i])) return -1;
        if (v[i] != floor(v[i]) || v[i] < 0 || v[i] > 1 << 30) { ted_error("%s: \"%s\" must be a whole number", path, keys[i]); return -1; }
    }
    Config d;   // a dense ted model of GPT-2's shape, read back through the checkpoint rules
    config_defaults(&d);
    ModelConfig *m = &d.model;
    m->vocab_size = (int)v[0]; m->n_positions = (int)v[1]; m->n_embd = (int)v[2]; m->n_layer = (int)v[3];
    m->n_head = (int)v[4]; m->n_inner = (int)v[5]; m->num_experts = 1;
    d.seq_len = 0;
    char *text = config_model_json(&d);
    int rc = config_load_model_text(c, text, path);
    ted_free(text);
    return rc;
}

// Whole-number keys of a transformers config (absent: the default given; -1 = required).
static int whole(const char *path, const cJSON *j, const char *const *keys, const double *deflt, double *v, int n) {
    for (int i = 0; i < n; i++) {
        if (deflt[i] < 0 && !cJSON_GetObjectItemCaseSensitive(j, keys[i])) { ted_error("%s: \"%s\" is missing", path, keys[i]); return -1; }
        if (num(path, j, keys[i], deflt[i], 0, &v[i])) return -1;
        if (v[i] != floor(v[i]) || v[i] < 0 || v[i] > 1 << 30) { ted_error("%s: \"%s\" must be a whole number", path, keys[i]); return -1; }
    }
    return 0;
}

// A sliding window ted's full causal attention does not compute: one below the sequences the model
// takes (max_position_embeddings) would attend differently past it. null or absent: none. 0 or -1.
static int no_window(const char *path, const cJSON *j, double n_positions) {
    double win;
    if (num(path, j, "sliding_window", 0, 0, &win)) return -1;
    if (!cJSON_GetObjectItemCaseSensitive(j, "sliding_window") || cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "sliding_window")) ||
        win >= n_positions)
        return 0;
    ted_error("%s: sliding_window %g is below max_position_embeddings %g: ted's attention is full causal, not a sliding "
              "window (the same for sequences of at most %g tokens: set max_position_embeddings to it)", path, win,
              n_positions, win > 0 ? win : 0);
    return -1;
}

// Llama, Mixtral and Qwen2 (transformers' LlamaConfig / MixtralConfig / Qwen2Config): the forward keys
// must be ted's llama block (silu, no rope scaling, pretraining_tp 1; Llama's attention_bias would bias
// o_proj too, which ted's llama has not; Qwen2's q/k/v biases are qkv_bias; no sliding window); a
// Mixtral runs dropless with Mixtral's router, as transformers runs it.
static int llama_config(const char *path, const cJSON *j, Config *c) {
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act"), *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    int mixtral = !strcmp(t->valuestring, "mixtral"), qwen2 = !strcmp(t->valuestring, "qwen2");
    double tp1 = 1;
    if (num(path, j, "pretraining_tp", 1, 1, &tp1)) return -1;
    const char *bad = act && strcmp(act->valuestring, "silu") ? "hidden_act is not silu"
                    : flag(j, "attention_bias", 0) ? "attention_bias true (it biases o_proj too; ted's llama has q/k/v "
                                                    "biases only, as Qwen2)"
                    : rs && !cJSON_IsNull(rs) ? "rope_scaling is set (ted applies plain rotary positions)"
                    : flag(j, "use_sliding_window", 0) ? "use_sliding_window true (ted's attention is full causal)"
                    : tp1 != 1 ? "pretraining_tp is not 1" : NULL;
    if (bad) { ted_error("%s: %s: not a model ted computes", path, bad); return -1; }
    static const char *const keys[] = {"vocab_size", "max_position_embeddings", "hidden_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "intermediate_size",
                                       "num_local_experts", "num_experts_per_tok"};
    const double deflt[] = {qwen2 ? 151936 : 32000, mixtral ? 4096 * 32 : qwen2 ? 32768 : 2048, -1, -1, -1, 0, -1,
                            mixtral ? 8 : 1, 2};   // v4.39's (Qwen2: v4.40's)
    double v[9], eps, theta, aux, eps0 = mixtral ? 1e-5 : 1e-6, theta0 = mixtral ? 1e6 : 1e4;
    if (whole(path, j, keys, deflt, v, 9) || num(path, j, "rms_norm_eps", eps0, eps0, &eps) ||
        num(path, j, "rope_theta", theta0, theta0, &theta) || num(path, j, "router_aux_loss_coef", 0.001, 0, &aux) ||
        (!qwen2 && no_window(path, j, v[1])))   // Qwen2 slides only with use_sliding_window
        return -1;
    Config d;
    config_defaults(&d);
    ModelConfig *m = &d.model;
    m->arch = ARCH_LLAMA;
    m->vocab_size = (int)v[0]; m->n_positions = (int)v[1]; m->n_embd = (int)v[2]; m->n_layer = (int)v[3];
    m->n_head = (int)v[4]; m->n_kv_head = (int)v[5]; m->rms_norm_eps = (float)eps; m->rope_theta = (float)theta;
    m->tie_word_embeddings = flag(j, "tie_word_embeddings", 0);
    m->qkv_bias = qwen2;
    m->num_experts = (int)v[7];
    if (m->num_experts > 1) {   // Mixtral: MoE in every block
        m->expert_inner = (int)v[6]; m->n_inner = (int)v[6]; m->top_k = (int)v[8]; m->moe_every = 1;
        m->expert_type = EXPERT_SWIGLU; m->router = ROUTER_MIXTRAL; m->capacity_factor = 0;
        m->aux_coef = (float)(aux * m->top_k);   // Mixtral counts each of a token's k choices
    } else m->n_inner = (int)v[6];
    d.seq_len = 0;
    char *text = config_model_json(&d);
    int rc = config_load_model_text(c, text, path);
    ted_free(text);
    return rc;
}

// Qwen2-MoE's forward keys that ted's llama block cannot compute, or NULL.
static const char *qwen_unsupported(const cJSON *j) {
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act"), *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
    return cJSON_IsString(act) && strcmp(act->valuestring, "silu") ? "hidden_act is not silu"
         : rs && !cJSON_IsNull(rs) ? "rope_scaling is set (ted applies plain rotary positions)"
         : flag(j, "use_sliding_window", 0) ? "use_sliding_window true (ted's attention is full causal)"
         : cJSON_GetArraySize(only) > 0 ? "mlp_only_layers is not empty (ted places MoE blocks by decoder_sparse_step)"
         : NULL;
}

// Qwen2-MoE (transformers v4.40's Qwen2MoeConfig and its defaults, v5's qkv_bias): a llama with q/k/v
// biases, MoE every decoder_sparse_step-th block with a gated shared expert of a whole number of
// experts' width, dropless softmax top-k routing, the k weights renormalised (norm_topk_prob: router
// mixtral) or not (router topk with topk_renorm false).
static int qwen_config(const char *path, const cJSON *j, Config *c) {
    const char *bad = qwen_unsupported(j);
    if (bad) { ted_error("%s: %s: not a model ted computes", path, bad); return -1; }
    static const char *const keys[] = {"vocab_size", "max_position_embeddings", "hidden_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "intermediate_size", "num_experts",
                                       "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                                       "decoder_sparse_step"};
    const double deflt[] = {151936, 32768, 2048, 24, 16, 16, 5632, 60, 4, 1408, 5632, 1};
    double v[12], eps, theta, aux;
    if (whole(path, j, keys, deflt, v, 12) || num(path, j, "rms_norm_eps", 1e-6, 1e-6, &eps) ||
        num(path, j, "rope_theta", 1e4, 1e4, &theta) || num(path, j, "router_aux_loss_coef", 0.001, 0, &aux))
        return -1;
    int norm = flag(j, "norm_topk_prob", 0), fe = (int)v[9], fs = (int)v[10];
    bad = v[7] < 2 ? "num_experts is below 2 (not a mixture)" : fe < 1 ? "moe_intermediate_size is 0"
        : fs < fe || fs % fe ? "shared_expert_intermediate_size is not a whole multiple of moe_intermediate_size (ted's "
                              "shared expert is shared_experts x expert_inner wide)"
        : v[11] < 1 ? "decoder_sparse_step is 0" : NULL;
    if (bad) { ted_error("%s: %s: not a model ted computes", path, bad); return -1; }
    Config d;
    config_defaults(&d);
    ModelConfig *m = &d.model;
    m->arch = ARCH_LLAMA;
    m->vocab_size = (int)v[0]; m->n_positions = (int)v[1]; m->n_embd = (int)v[2]; m->n_layer = (int)v[3];
    m->n_head = (int)v[4]; m->n_kv_head = (int)v[5]; m->n_inner = (int)v[6]; m->rms_norm_eps = (float)eps;
    m->rope_theta = (float)theta; m->tie_word_embeddings = flag(j, "tie_word_embeddings", 0);
    m->qkv_bias = flag(j, "qkv_bias", 1);
    m->num_experts = (int)v[7]; m->top_k = (int)v[8]; m->moe_every = (int)v[11];
    m->expert_inner = fe == m->n_inner ? 0 : fe;   // 0: n_inner, as ted writes it
    m->shared_experts = fs / fe; m->shared_expert_gate = 1;
    m->expert_type = EXPERT_SWIGLU; m->router = norm ? ROUTER_MIXTRAL : ROUTER_TOPK; m->topk_renorm = norm;
    m->capacity_factor = 0;
    m->aux_coef = (float)(aux * m->top_k);   // Qwen2-MoE counts each of a token's k choices, as Mixtral
    d.seq_len = 0;
    char *text = config_model_json(&d);
    int rc = config_load_model_text(c, text, path);
    ted_free(text);
    return rc;
}

// The architectures ted reads from a transformers folder, by model_type.
typedef struct { const char *model_type; int (*read)(const char *path, const cJSON *j, Config *c); } Arch;
static const Arch archs[] = {{"gpt2", gpt2_config}, {"llama", llama_config}, {"mixtral", llama_config},
                             {"qwen2", llama_config}, {"qwen2_moe", qwen_config}};

int hf_import_config(const char *path, Config *c) {
    cJSON *j = json_read_object(path);   // a key twice is refused: Python's json reads the last, cJSON the first
    if (!j) return -1;
    if (check_types(path, j)) { cJSON_Delete(j); return -1; }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "";
    int rc = -1, found = 0;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(type, archs[i].model_type)) { found = 1; rc = archs[i].read(path, j, c); }
    if (!found) ted_error("%s: model_type \"%.40s\" is not one ted reads (gpt2, llama, mixtral, qwen2, qwen2_moe, or a folder ted saved)", path, type);
    cJSON_Delete(j);
    return rc;
}

// The name a llama MoE tensor in Qwen2-MoE's layout had in Mixtral's, which ted used for every llama MoE
// before shared experts took Qwen2-MoE's names ("model.layers.N.mlp.experts.E.gate_proj.weight" →
// "model.layers.N.block_sparse_moe.experts.E.w1.weight"); 0 when name is not such a tensor.
static int mixtral_name(const char *name, char *out, size_t len) {
    static const char *const from[] = {"gate_proj.", "up_proj.", "down_proj."}, *const to[] = {"w1.", "w3.", "w2."};
    const char *m = strstr(name, ".mlp."), *rest = m ? m + 5 : NULL;
    if (!m || strncmp(name, "model.layers.", 13) ||
        (strncmp(rest, "gate.", 5) && strncmp(rest, "experts.", 8) && strncmp(rest, "shared_expert.", 14)))
        return 0;
    int n = snprintf(out, len, "%.*s.block_sparse_moe.", (int)(m - name), name);
    for (int i = 0; i < 3; i++) {
        const char *p = strstr(rest, from[i]);
        if (p) return snprintf(out + n, len - n, "%.*s%s%s", (int)(p - rest), rest, to[i], p + strlen(from[i])) > 0;
    }
    return snprintf(out + n, len - n, "%s", rest) > 0;
}

const float *hf_import_get(StFile *f, const char *name, int *ndim, int64_t shape[4]) {
    const float *x = st_get(f, name, ndim, shape);
    static const char prefix[] = "transformer.";
    char old[256];
    if (!x && !strncmp(name, prefix, sizeof prefix - 1)) x = st_get(f, name + sizeof prefix - 1, ndim, shape);
    if (!x && mixtral_name(name, old, sizeof old)) x = st_get(f, old, ndim, shape);
    return x;
}

int hf_import_check_head(StFile *f, const char *file, const char *embedding) {
    int nh, nw;
    int64_t sh[4], sw[4];
    const float *head = st_get(f, "lm_head.weight", &nh, sh);
    if (!head) return 0;
    const float *wte = hf_import_get(f, embedding, &nw, sw);
    int same = wte && nh == nw && nh == 2 && sh[0] == sw[0] && sh[1] == sw[1] &&
               !memcmp(head, wte, sizeof(float) * (size_t)(sh[0] * sh[1]));
    if (!same) { ted_error("%s: lm_head.weight differs from %s: the model ties the head to the embedding", file, embedding); return -1; }
    return 0;
}
