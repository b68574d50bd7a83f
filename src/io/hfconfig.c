// hfconfig.c — Hugging Face keys in a checkpoint's config.json (see hfconfig.h).
#include "io/hfconfig.h"
#include "core/alloc.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
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
// Llama's and Mixtral's config keys that ted's share in name and meaning (the others, as
// hidden_size for n_embd, are written beside ted's own).
static const char *const llama_keys[] = {"vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings", NULL};
// Qwen2-MoE's: also num_experts (the routed experts).
static const char *const qwen_keys[] = {"vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "num_experts",
                                        NULL};

// A llama MoE saved as Qwen2MoeForCausalLM.
static int is_qwen(const ModelConfig *m) { return cfg_qwen_layout(m) && !hf_llama_layout(m); }

static int is_top_key(const char *const *keys, const char *k) {
    for (int i = 0; keys[i]; i++)
        if (strcmp(keys[i], k) == 0) return 1;
    return 0;
}

// The flat keys of config_model_json, the ted-only ones moved into "ted".
static cJSON *namespaced(const Config *c) {
    const char *const *top = is_qwen(&c->model) ? qwen_keys : cfg_is_llama(&c->model) ? llama_keys : gpt2_keys;
    char *flat = config_model_json(c);
    cJSON *src = cJSON_Parse(flat);
    ted_free(flat);
    cJSON *o = cJSON_CreateObject(), *ted = cJSON_CreateObject();
    while (src->child) {
        cJSON *j = cJSON_DetachItemViaPointer(src, src->child);
        cJSON_AddItemToObject(is_top_key(top, j->string) ? o : ted, j->string, j);
    }
    cJSON_Delete(src);
    cJSON_AddItemToObject(o, CONFIG_TED_SECTION, ted);
    return o;
}

// Llama's shape keys (transformers v4.39 LlamaConfig; MixtralConfig shares them): what ted's
// llama computes: SiLU, no dropout.
static void add_llama_shape(cJSON *o, const ModelConfig *m, int intermediate) {
    cJSON_AddNumberToObject(o, "hidden_size", m->n_embd);
    cJSON_AddNumberToObject(o, "intermediate_size", intermediate);
    cJSON_AddNumberToObject(o, "num_hidden_layers", m->n_layer);
    cJSON_AddNumberToObject(o, "num_attention_heads", m->n_head);
    cJSON_AddNumberToObject(o, "num_key_value_heads", cfg_kv_heads(m));
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->n_positions);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    cJSON_AddNumberToObject(o, "attention_dropout", 0);
    int eot = m->vocab_size > 50256 ? 50256 : m->vocab_size - 1;
    cJSON_AddNumberToObject(o, "bos_token_id", eot);
    cJSON_AddNumberToObject(o, "eos_token_id", eot);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
}

static void add_class(cJSON *o, const char *model_type, const char *arch) {
    cJSON_AddStringToObject(o, "model_type", model_type);
    cJSON *a = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
}

// The router_aux_loss_coef of Mixtral and Qwen2-MoE: they count a token's k choices each as a whole
// token (ted: 1/k each), the same loss at coef/k.
static void add_aux_coef(cJSON *o, const ModelConfig *m) {
    char coef[32];
    snprintf(coef, sizeof coef, "%.6g", (double)m->aux_coef / m->top_k);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", strtod(coef, NULL));
    cJSON_AddFalseToObject(o, "output_router_logits");
}

// Qwen2-MoE (transformers v4.40's Qwen2MoeConfig; its attention always has q/k/v biases, v5's qkv_bias
// defaults to true): intermediate_size is the dense blocks' FFN, MoE every decoder_sparse_step-th block,
// the shared expert of shared_experts·expert_inner hidden units; the k probabilities renormalised
// (norm_topk_prob) as ted's routers do unless topk_renorm is false or topk routes top-1.
static void add_qwen(cJSON *o, const ModelConfig *m) {
    add_class(o, "qwen2_moe", "Qwen2MoeForCausalLM");
    add_llama_shape(o, m, cfg_ffn(m));
    cJSON_AddNumberToObject(o, "num_experts_per_tok", m->top_k);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", cfg_expert_inner(m));
    cJSON_AddNumberToObject(o, "shared_expert_intermediate_size", m->shared_experts * cfg_expert_inner(m));
    cJSON_AddBoolToObject(o, "norm_topk_prob", hf_norm_topk_prob(m));
    cJSON_AddNumberToObject(o, "decoder_sparse_step", m->moe_every);
    cJSON_AddArrayToObject(o, "mlp_only_layers");
    add_aux_coef(o, m);
    cJSON_AddFalseToObject(o, "use_sliding_window");
    cJSON_AddNullToObject(o, "sliding_window");
    cJSON_AddNumberToObject(o, "max_window_layers", m->n_layer);
}

// A dense llama as LlamaForCausalLM, or with q/k/v biases as Qwen2ForCausalLM (Llama's attention_bias
// would bias o_proj too); an MoE llama in Mixtral's form as MixtralForCausalLM or with shared experts as
// Qwen2MoeForCausalLM; another MoE llama stays ted's own (hf_llama_layout says why).
static void add_llama(cJSON *o, const ModelConfig *m) {
    const char *why = hf_llama_layout(m);
    if (m->num_experts == 1 && m->qkv_bias) {   // transformers v4.40's Qwen2Config
        add_class(o, "qwen2", "Qwen2ForCausalLM");
        add_llama_shape(o, m, cfg_ffn(m));
        cJSON_AddFalseToObject(o, "use_sliding_window");
        cJSON_AddNullToObject(o, "sliding_window");
        cJSON_AddNumberToObject(o, "max_window_layers", m->n_layer);
    } else if (m->num_experts == 1) {
        add_class(o, "llama", "LlamaForCausalLM");
        add_llama_shape(o, m, cfg_ffn(m));
        cJSON_AddNumberToObject(o, "pretraining_tp", 1);
        cJSON_AddFalseToObject(o, "attention_bias");
        cJSON_AddNullToObject(o, "rope_scaling");
    } else if (!why && cfg_qwen_layout(m)) add_qwen(o, m);
    else if (!why) {
        add_class(o, "mixtral", "MixtralForCausalLM");
        add_llama_shape(o, m, cfg_expert_inner(m));
        cJSON_AddNumberToObject(o, "num_local_experts", m->num_experts);
        cJSON_AddNumberToObject(o, "num_experts_per_tok", m->top_k);
        add_aux_coef(o, m);
        cJSON_AddNullToObject(o, "sliding_window");
    } else {
        cJSON_AddStringToObject(o, "model_type", "ted_moe");
        char note[300];
        snprintf(note, sizeof note, "a llama Mixture-of-Experts that no Hugging Face class computes: %s; ted eval and ted "
                                    "generate load it", why);
        cJSON_AddStringToObject(o, "ted_note", note);
    }
}

int hf_norm_topk_prob(const ModelConfig *m) { return m->topk_renorm && (m->router == ROUTER_MIXTRAL || m->top_k > 1); }

// Qwen2-MoE's block: q/k/v biases, the shared expert's sigmoid gate, softmax top-k routing.
static const char *qwen_layout(const ModelConfig *m) {
    if (!m->qkv_bias) return "shared experts without q/k/v biases (Qwen2-MoE's attention has them: model.qkv_bias)";
    if (!m->shared_expert_gate) return "shared experts without Qwen2-MoE's sigmoid gate (moe.shared_expert_gate)";
    if (m->router != ROUTER_MIXTRAL && m->router != ROUTER_TOPK)
        return "a router other than Qwen2-MoE's softmax top-k (moe.router topk or mixtral)";
    if (m->bias_update_rate > 0 || m->num_groups > 1) return "aux-loss-free bias or group-limited routing";
    return NULL;
}

const char *hf_llama_layout(const ModelConfig *m) {
    if (m->num_experts == 1) return NULL;
    if (m->shared_experts > 0) return qwen_layout(m);
    if (m->moe_every != 1) return "MoE in every k-th block only (moe_every > 1) without shared experts; Mixtral has it in "
                                  "every block";
    if (m->qkv_bias) return "q/k/v biases without shared experts (Mixtral's attention has no biases)";
    if (m->router != ROUTER_MIXTRAL && !(m->router == ROUTER_TOPK && m->top_k > 1))
        return "a router other than Mixtral's (moe.router mixtral, or topk with top_k >= 2)";
    if (!m->topk_renorm) return "unrenormalised gates (moe.topk_renorm false; Mixtral renormalises the k weights)";
    if (m->bias_update_rate > 0 || m->num_groups > 1) return "aux-loss-free bias or group-limited routing";
    return NULL;
}

char *hf_config_json(const Config *c) {
    cJSON *o = namespaced(c);
    const ModelConfig *m = &c->model;
    if (cfg_is_llama(m)) add_llama(o, m);
    else if (m->num_experts == 1) add_gpt2(o, m);
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
