// defaults.c — the values a run gets with neither JSON nor flags, and the names of the settings
// whose value is one of a few words.
#include "config/tables.h"
#include <stdlib.h>
#include <string.h>

const char *const router_names[ROUTER_KINDS] = {"topk", "noisy_topk", "switch", "gshard", "expert_choice", "mixtral"};
const char *const arch_names[ARCH_KINDS] = {"gpt2", "llama"};
const char *const expert_type_names[EXPERT_KINDS] = {"gelu", "swiglu"};
const char *const sched_names[SCHED_KINDS] = {"WarmupCosine", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};

int config_name_index(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

const char *config_pp_schedule_name(int kind) {
    return kind == PP_GPIPE ? "gpipe" : kind == PP_1F1B ? "1f1b" : "interleaved";
}

int config_pp_schedule(const char *name) {
    if (!strcmp(name, "gpipe")) return PP_GPIPE;
    if (!strcmp(name, "1f1b")) return PP_1F1B;
    if (!strcmp(name, "interleaved")) return PP_INTERLEAVED;
    return -1;
}

void config_arch_defaults(ModelConfig *m) {
    m->arch = ARCH_GPT2;
    m->n_kv_head = 0;
    m->rms_norm_eps = 1e-5f;
    m->rope_theta = 10000.0f;
    m->tie_word_embeddings = 1;
    m->qkv_bias = 0;
}

// min_lr follows lr (lr/10) until it is given explicitly: a tenth of lr as written (6e-05 for
// 0.0006, not the float quotient 6.0000002e-05).
void config_follow_lr(Config *c) {
    char lr[32];
    config_format_float(lr, sizeof lr, c->lr);
    if (!c->min_lr_set) c->min_lr = (float)(strtod(lr, NULL) / 10);
}

// The model of design §2 (a dense GPT of 4 blocks of width 256 on bytes) and its MoE keys.
static void model_defaults(ModelConfig *m) {
    m->vocab_size = 256;
    m->n_positions = 256;
    m->n_embd = 256;
    m->n_layer = 4;
    m->n_head = 4;
    m->n_inner = 0;
    m->num_experts = 1;
    m->top_k = 2;
    m->moe_every = 2;
    m->capacity_factor = 1.0f;
    m->min_capacity = 4;
    m->group_size = 1;
    m->aux_coef = 0.01f;
    m->z_coef = 0.0f;
    m->router = ROUTER_TOPK;
    m->jitter_eps = 0.01f;
    m->importance_coef = 0.01f;
    m->load_coef = 0.01f;
    m->num_groups = 1;
    m->topk_groups = 1;
    m->expert_type = EXPERT_GELU;
    m->topk_renorm = 1;
    config_arch_defaults(m);
}

// Training (design §3), the optimizer and its schedule, the loss scaler: DeepSpeed's defaults
// where DeepSpeed has the key.
static void training_defaults(Config *c) {
    c->seq_len = 0;
    c->micro_batch = 8;
    c->grad_accum = 1;
    c->steps = 1000;
    c->lr = 6e-4f;
    c->min_lr_set = 0;
    config_follow_lr(c);
    c->warmup = 100;
    c->sched = (SchedConfig){SCHED_WARMUP_COSINE, 0.0f, -1.0f, 0, 0, 0.0f, 0.0001f};
    c->scaler = (LossScaleConfig){0.0f, 16, 1000, 2, 0, 1.0f};
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->clip = 1.0f;
    c->seed = 1337;
    c->data_sequential = 0;
    c->freeze_step = 100;
    c->adam_w_mode = 1;
    c->compression = 1;
    c->tile_size = 1800000;
}

// The layout, ZeRO, the pipeline, the monitors, the run's own switches.
static void run_defaults(Config *c) {
    c->overlap_degree = 1;
    c->zero_stage = 1;
    c->reduce_bucket_size = 500000000;
    c->tp = 1;
    c->ep = 1;
    c->pp = 1;
    c->pp_schedule = PP_1F1B;
    c->pp_virtual = 1;
    c->log_every = 1;
    c->watchdog = 600;
    c->debug_expert_grad_scale = 1.0f;
    c->device = DEV_CPU;
    strcpy(c->tb_path, "runs");
    strcpy(c->tb_job, "ted");
    strcpy(c->csv_path, "runs");
    strcpy(c->csv_job, "ted");
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    model_defaults(&c->model);
    training_defaults(c);
    run_defaults(c);
    sparse_config_defaults(&c->sparse);
    config_given_clear();
}
