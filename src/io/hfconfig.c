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

// ted's model and moe keys, flat at the top level (design §7: config_model_json). Those that GPT-2,
// Llama, Mixtral or Qwen2-MoE also have mean the same there (vocab_size, n_embd, ..., num_experts,
// rms_norm_eps); the others transformers keeps as attributes it does not read, except top_k, which
// it would take as sampling's top_k: generation_config.json (hf_generation_config_json) says the
// generation settings instead.
static cJSON *flat_keys(const Config *c) {
    char *flat = config_model_json(c);
    cJSON *o = cJSON_Parse(flat);
    ted_free(flat);
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

// A cJSON object as text with a final newline (allocated through ted_alloc, MEM_TEMP); o deleted.
static char *json_text(cJSON *o) {
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

char *hf_generation_config_json(const Config *c) {
    cJSON *o = cJSON_CreateObject();
    int eot = c->model.vocab_size > 50256 ? 50256 : c->model.vocab_size - 1;
    cJSON_AddNumberToObject(o, "bos_token_id", eot);
    cJSON_AddNumberToObject(o, "eos_token_id", eot);
    return json_text(o);
}

char *hf_config_json(const Config *c) {
    cJSON *o = flat_keys(c);
    const ModelConfig *m = &c->model;
    if (cfg_is_llama(m)) add_llama(o, m);
    else if (m->num_experts == 1) add_gpt2(o, m);
    else {
        cJSON_AddStringToObject(o, "model_type", "ted_moe");
        cJSON_AddStringToObject(o, "ted_note", "a Mixture-of-Experts GPT (num_experts experts, top_k chosen per token, "
                                               "an MoE FFN in every moe_every-th block) in GPT-2's layout; the expert FFNs are "
                                               "transformer.h.N.mlp.experts.E.*; ted eval and ted generate load it, "
                                               "transformers' GPT2LMHeadModel cannot");
    }
    return json_text(o);
}
