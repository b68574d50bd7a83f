// config.c — the settings of a run (see config.h): defaults, a DeepSpeed-like JSON file,
// `ted train` flags layered on top, the validation rules, and a checkpoint's flat
// config.json. JSON keys and flags are each described by one table; the same walker reads
// the training config and the checkpoint config, and the flag table also prints the help.
#include "config/config.h"
#include "core/alloc.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CF(field) offsetof(Config, field)
#define FIELD(c, off, type) ((type *)((char *)(c) + (off)))

// The JSON keys (full paths) and the flags' JSON keys given since config_defaults: the rules
// that depend on whether a key was given (a scheduler parameter of another type, a key of a
// switched-off feature) read them.
#define MAX_GIVEN 256
static char given_keys[MAX_GIVEN][256];
static int n_given;

static void mark_given(const char *path) {
    for (int i = 0; i < n_given; i++)
        if (!strcmp(given_keys[i], path)) return;
    if (n_given < MAX_GIVEN) snprintf(given_keys[n_given++], sizeof given_keys[0], "%s", path);
}

static int given(const char *path) {
    for (int i = 0; i < n_given; i++)
        if (!strcmp(given_keys[i], path)) return 1;
    return 0;
}

// The keys of the `model` and `moe` sections, each an int or a float field of ModelConfig.
#define MODEL_FIELDS(X) X(vocab_size, J_INT) X(n_positions, J_INT) X(n_embd, J_INT) \
    X(n_layer, J_INT) X(n_head, J_INT) X(n_inner, J_INT)
#define MOE_FIELDS(X) X(num_experts, J_INT) X(top_k, J_INT) X(moe_every, J_INT) \
    X(capacity_factor, J_FLOAT) X(min_capacity, J_INT) X(group_size, J_INT) \
    X(aux_coef, J_FLOAT) X(z_coef, J_FLOAT)
// The routing family (docs/config.md, Routers and experts): optional in a checkpoint's config.json (older ones lack them).
#define ROUTE_FIELDS(X) X(router, J_ROUTER) X(use_rts, J_BOOL) X(jitter_eps, J_FLOAT) \
    X(importance_coef, J_FLOAT) X(load_coef, J_FLOAT) X(bias_update_rate, J_FLOAT) X(num_groups, J_INT) \
    X(topk_groups, J_INT) X(shared_experts, J_INT) X(expert_inner, J_INT) X(expert_type, J_EXPERT_TYPE) \
    X(shared_expert_gate, J_BOOL) X(topk_renorm, J_BOOL)
// The block family (docs/llama.md): optional in a checkpoint's config.json, written for llama only.
#define ARCH_FIELDS(X) X(arch, J_ARCH) X(n_kv_head, J_INT) X(rms_norm_eps, J_FLOAT) X(rope_theta, J_FLOAT) \
    X(tie_word_embeddings, J_BOOL) X(qkv_bias, J_BOOL)

const char *const router_names[ROUTER_KINDS] = {"topk", "noisy_topk", "switch", "gshard", "expert_choice", "mixtral"};
const char *const arch_names[ARCH_KINDS] = {"gpt2", "llama"};
const char *const expert_type_names[EXPERT_KINDS] = {"gelu", "swiglu"};
const char *const sched_names[SCHED_KINDS] = {"WarmupCosine", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};

// The index of name in names[n], or -1.
static int name_index(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

static void resolve_min_lr(Config *c);

// The block family's keys (ARCH_FIELDS) as a gpt2 model has them.
static void arch_defaults(ModelConfig *m) {
    m->arch = ARCH_GPT2;
    m->n_kv_head = 0;
    m->rms_norm_eps = 1e-5f;
    m->rope_theta = 10000.0f;
    m->tie_word_embeddings = 1;
    m->qkv_bias = 0;
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    ModelConfig *m = &c->model;
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
    arch_defaults(m);
    c->seq_len = 0;
    c->micro_batch = 8;
    c->grad_accum = 1;
    c->overlap_degree = 1;
    c->steps = 1000;
    c->lr = 6e-4f;
    c->min_lr_set = 0;
    resolve_min_lr(c);
    c->warmup = 100;
    c->sched = (SchedConfig){SCHED_WARMUP_COSINE, 0.0f, -1.0f, 0, 0, 0.0f, 0.0001f};   // DeepSpeed's defaults
    c->scaler = (LossScaleConfig){0.0f, 16, 1000, 2, 0, 1.0f};                         // DeepSpeed's defaults
    n_given = 0;
    strcpy(c->tb_path, "runs");
    strcpy(c->tb_job, "ted");
    strcpy(c->csv_path, "runs");
    strcpy(c->csv_job, "ted");
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->clip = 1.0f;
    c->seed = 1337;
    c->data_sequential = 0;
    c->zero_stage = 1;
    c->reduce_bucket_size = 500000000;
    c->freeze_step = 100;
    c->compression = 1;
    c->tile_size = 1800000;
    c->tp = 1;
    c->ep = 1;
    c->pp = 1;
    c->pp_schedule = PP_1F1B;
    c->pp_virtual = 1;
    c->log_every = 1;
    c->watchdog = 600;
    c->debug_expert_grad_scale = 1.0f;
    sparse_config_defaults(&c->sparse);
}

static void format_float(char *buf, size_t n, float v);

// min_lr follows lr (lr/10) until it is given explicitly: a tenth of lr as written (6e-05 for
// 0.0006, not the float quotient 6.0000002e-05).
static void resolve_min_lr(Config *c) {
    char lr[32];
    format_float(lr, sizeof lr, c->lr);
    if (!c->min_lr_set) c->min_lr = (float)(strtod(lr, NULL) / 10);
}

// ---------------------------------------------------------------------------------------
// JSON

typedef enum {
    J_INT, J_LONG, J_FLOAT, J_BOOL, J_SEED, J_SECTION, J_ORDER, J_OPTIMIZER_TYPE,
    J_SCHEDULER_TYPE, J_PP_SCHEDULE, J_PP_LAYERS, J_ROUTER, J_EXPERT_TYPE, J_ARCH, J_BETAS, J_COMPRESSION, J_OFFLOAD_DEVICE,
    J_MIN_LR, J_WARMUP_TYPE, J_OFF_ONLY, J_COMMENT, J_SPARSE, J_PATH, J_NAME
} JKind;

typedef struct JKey {
    const char *name;
    JKind kind;
    size_t off;                   // field of Config (scalar kinds)
    const struct JKey *section;   // keys of a nested object (J_SECTION)
} JKey;

#define MODEL_KEY(name, kind) {#name, kind, CF(model.name), NULL},
static const JKey model_keys[] = { MODEL_FIELDS(MODEL_KEY) ARCH_FIELDS(MODEL_KEY) {NULL, 0, 0, NULL} };
static const JKey moe_keys[] = { MOE_FIELDS(MODEL_KEY) ROUTE_FIELDS(MODEL_KEY)
                                  {"overlap_degree", J_INT, CF(overlap_degree), NULL},
                                  {"progress_thread", J_BOOL, CF(progress_thread), NULL}, {NULL, 0, 0, NULL} };
// A checkpoint's config.json: model and moe keys flat, plus seq_len; the keys before
// N_FLAT_REQUIRED must be present, the routing family's may be missing (older checkpoints).
static const JKey flat_model_keys[] = {
    MODEL_FIELDS(MODEL_KEY) MOE_FIELDS(MODEL_KEY)
    {"seq_len", J_INT, CF(seq_len), NULL}, ROUTE_FIELDS(MODEL_KEY) ARCH_FIELDS(MODEL_KEY)
    {"sparse_attention", J_SPARSE, CF(sparse), NULL},
    {NULL, 0, 0, NULL}
};
#define COUNT_KEY(name, kind) + 1
enum { N_FLAT_REQUIRED = 1 MODEL_FIELDS(COUNT_KEY) MOE_FIELDS(COUNT_KEY) };

static const JKey optimizer_params[] = {
    {"lr", J_FLOAT, CF(lr), NULL},
    {"betas", J_BETAS, 0, NULL},
    {"eps", J_FLOAT, CF(eps), NULL},
    {"weight_decay", J_FLOAT, CF(weight_decay), NULL},
    {"freeze_step", J_INT, CF(freeze_step), NULL},
    {"compression", J_COMPRESSION, CF(compression), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey optimizer_keys[] = {
    {"type", J_OPTIMIZER_TYPE, 0, NULL},
    {"params", J_SECTION, 0, optimizer_params},
    {"tile_size", J_LONG, CF(tile_size), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey scheduler_params[] = {
    {"warmup_num_steps", J_INT, CF(warmup), NULL},
    {"min_lr", J_MIN_LR, CF(min_lr), NULL},
    {"warmup_min_lr", J_FLOAT, CF(sched.warmup_min_lr), NULL},
    {"warmup_max_lr", J_FLOAT, CF(sched.warmup_max_lr), NULL},
    {"warmup_type", J_WARMUP_TYPE, CF(sched.warmup_linear), NULL},
    {"total_num_steps", J_INT, CF(sched.total_num_steps), NULL},
    {"warmup_min_ratio", J_FLOAT, CF(sched.warmup_min_ratio), NULL},
    {"cos_min_ratio", J_FLOAT, CF(sched.cos_min_ratio), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey scheduler_keys[] = {
    {"type", J_SCHEDULER_TYPE, 0, NULL},
    {"params", J_SECTION, 0, scheduler_params},
    {NULL, 0, 0, NULL}
};
static const JKey bf16_keys[] = { {"enabled", J_BOOL, CF(bf16), NULL}, {NULL, 0, 0, NULL} };
static const JKey fp16_keys[] = {
    {"enabled", J_BOOL, CF(fp16), NULL},
    {"loss_scale", J_FLOAT, CF(scaler.loss_scale), NULL},
    {"initial_scale_power", J_INT, CF(scaler.initial_scale_power), NULL},
    {"loss_scale_window", J_INT, CF(scaler.window), NULL},
    {"hysteresis", J_INT, CF(scaler.hysteresis), NULL},
    {"consecutive_hysteresis", J_BOOL, CF(scaler.consecutive_hysteresis), NULL},
    {"min_loss_scale", J_FLOAT, CF(scaler.min_scale), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey offload_keys[] = { {"device", J_OFFLOAD_DEVICE, CF(offload), NULL}, {NULL, 0, 0, NULL} };
static const JKey zero_keys[] = {
    {"stage", J_INT, CF(zero_stage), NULL},
    {"reduce_bucket_size", J_LONG, CF(reduce_bucket_size), NULL},
    {"overlap_comm", J_BOOL, CF(overlap_comm), NULL},
    {"offload_optimizer", J_SECTION, 0, offload_keys},
    {NULL, 0, 0, NULL}
};
static const JKey checkpointing_keys[] = {
    {"enabled", J_BOOL, CF(activation_checkpointing), NULL},
    {"partition_activations", J_OFF_ONLY, 0, NULL},
    {"contiguous_memory_optimization", J_OFF_ONLY, 0, NULL},
    {"cpu_checkpointing", J_OFF_ONLY, 0, NULL},
    {NULL, 0, 0, NULL}
};
static const JKey tensorboard_keys[] = {
    {"enabled", J_BOOL, CF(tb_enabled), NULL},
    {"output_path", J_PATH, CF(tb_path), NULL},
    {"job_name", J_NAME, CF(tb_job), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey csv_keys[] = {
    {"enabled", J_BOOL, CF(csv_enabled), NULL},
    {"output_path", J_PATH, CF(csv_path), NULL},
    {"job_name", J_NAME, CF(csv_job), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey pipeline_keys[] = {
    {"schedule", J_PP_SCHEDULE, CF(pp_schedule), NULL},
    {"virtual_stages", J_INT, CF(pp_virtual), NULL},
    {"layers", J_PP_LAYERS, 0, NULL},
    {NULL, 0, 0, NULL}
};
static const JKey top_keys[] = {
    {"train_micro_batch_size_per_gpu", J_INT, CF(micro_batch), NULL},
    {"train_batch_size", J_INT, CF(train_batch_size), NULL},
    {"gradient_accumulation_steps", J_INT, CF(grad_accum), NULL},
    {"train_steps", J_INT, CF(steps), NULL},
    {"seq_len", J_INT, CF(seq_len), NULL},
    {"seed", J_SEED, CF(seed), NULL},
    {"gradient_clipping", J_FLOAT, CF(clip), NULL},
    {"data_order", J_ORDER, CF(data_sequential), NULL},
    {"eval_every", J_INT, CF(eval_every), NULL},
    {"eval_windows", J_INT, CF(eval_windows), NULL},
    {"save_every", J_INT, CF(save_every), NULL},
    {"log_every", J_INT, CF(log_every), NULL},
    {"steps_per_print", J_INT, CF(log_every), NULL},
    {"wall_clock_breakdown", J_BOOL, CF(wall_clock_breakdown), NULL},
    {"sample_every", J_INT, CF(sample_every), NULL},
    {"threads", J_INT, CF(threads), NULL},
    {"tp", J_INT, CF(tp), NULL},
    {"ep", J_INT, CF(ep), NULL},
    {"pp", J_INT, CF(pp), NULL},
    {"pipeline", J_SECTION, 0, pipeline_keys},
    {"dtd", J_BOOL, CF(dtd), NULL},
    {"cac", J_BOOL, CF(cac), NULL},
    {"optimizer", J_SECTION, 0, optimizer_keys},
    {"scheduler", J_SECTION, 0, scheduler_keys},
    {"bf16", J_SECTION, 0, bf16_keys},
    {"fp16", J_SECTION, 0, fp16_keys},
    {"zero_optimization", J_SECTION, 0, zero_keys},
    {"activation_checkpointing", J_SECTION, 0, checkpointing_keys},
    {"model", J_SECTION, 0, model_keys},
    {"moe", J_SECTION, 0, moe_keys},
    {"sparse_attention", J_SPARSE, CF(sparse), NULL},
    {"tensorboard", J_SECTION, 0, tensorboard_keys},
    {"csv_monitor", J_SECTION, 0, csv_keys},
    {"comment", J_COMMENT, 0, NULL},
    {"_comment", J_COMMENT, 0, NULL},
    {NULL, 0, 0, NULL}
};

// A short description of a JSON value for error messages ("a string \"2\"", "1.5", ...).
static const char *describe(const cJSON *j, char *buf, size_t n) {
    if (cJSON_IsString(j)) snprintf(buf, n, "the string \"%.40s\"", j->valuestring);
    else if (cJSON_IsNumber(j)) snprintf(buf, n, "%.10g", j->valuedouble);
    else if (cJSON_IsBool(j)) snprintf(buf, n, "%s", cJSON_IsTrue(j) ? "true" : "false");
    else if (cJSON_IsNull(j)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(j) && !j->child) snprintf(buf, n, "an empty array");
    else if (cJSON_IsArray(j)) snprintf(buf, n, "an array of %d entries", cJSON_GetArraySize(j));
    else if (cJSON_IsObject(j)) snprintf(buf, n, "an object");
    else snprintf(buf, n, "an unknown value");
    return buf;
}

static int type_error(const char *file, const char *key, const char *want, const cJSON *j) {
    char got[96];
    ted_error("%s: key \"%s\" must be %s (got %s)", file, key, want, describe(j, got, sizeof got));
    return -1;
}

// An integral JSON number in [lo, hi]: 0, -1 when not an integer, -2 when out of range.
static int json_integer(const cJSON *j, double lo, double hi, double *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!isfinite(v) || v != floor(v)) return -1;
    if (v < lo || v > hi) return -2;
    *out = v;
    return 0;
}

static int integer_error(const char *file, const char *key, int why, const char *range, const cJSON *j) {
    char want[96];
    snprintf(want, sizeof want, "an integer%s%s", why == -2 ? " in " : "", why == -2 ? range : "");
    return type_error(file, key, want, j);
}

static int json_float(const cJSON *j, float *out) {
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || fabs(j->valuedouble) > FLT_MAX) return -1;
    *out = (float)j->valuedouble;
    return 0;
}

static int walk(Config *c, const cJSON *obj, const JKey *keys, const char *prefix, const char *file);
static void sparse_unknown(const char *section, const char *name);

// The unknown keys, and the keys ted cannot honour, of the file being read, gathered into one line.
static struct { char text[1536]; int n; } key_problems;

static void key_problem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void key_problem(const char *fmt, ...) {
    char one[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(one, sizeof one, fmt, ap);
    va_end(ap);
    size_t len = strlen(key_problems.text);
    if (len + strlen(one) + 16 < sizeof key_problems.text)
        snprintf(key_problems.text + len, sizeof key_problems.text - len, "%s%s", key_problems.n ? "; " : "", one);
    else if (!strstr(key_problems.text, "; ..."))
        snprintf(key_problems.text + len, sizeof key_problems.text - len, "; ...");
    key_problems.n++;
}

// DeepSpeed keys that ted knows and does not do: why, instead of "unknown".
static const char *const not_honoured[][2] = {
    {"activation_checkpointing.partition_activations", "ted's checkpointing keeps each rank's activations whole"},
    {"activation_checkpointing.contiguous_memory_optimization", "ted's checkpointed activations are not moved into one buffer"},
    {"activation_checkpointing.cpu_checkpointing", "ted keeps checkpointed activations in device memory"},
    {"zero_optimization.offload_param", "ted offloads the optimizer state only (offload_optimizer)"},
    {"zero_optimization.allgather_bucket_size", "ted gathers each parameter whole"},
    {"zero_optimization.stage3_max_live_parameters", "ted has ZeRO stages 0, 1 and 2"},
    {"fp16.auto_cast", "ted casts inside its own mixed-precision ops"},
    {"amp", "ted has bf16 and fp16, not apex amp"},
    {"communication_data_type", "ted's collectives carry the gradients' own type"},
    {"prescale_gradients", "ted scales the gradients once, in the optimizer"},
    {"gradient_predivide_factor", "ted scales the gradients once, in the optimizer"},
    {"wandb", "ted logs to --log (JSON lines), tensorboard or csv_monitor"},
    {"comet", "ted logs to --log (JSON lines), tensorboard or csv_monitor"},
    {"flops_profiler", "ted reports MFU on its progress line and in --log"},
};

static const char *not_honoured_why(const char *key) {
    for (size_t i = 0; i < sizeof not_honoured / sizeof not_honoured[0]; i++)
        if (!strcmp(not_honoured[i][0], key)) return not_honoured[i][1];
    return NULL;
}

static const char *off_only_why(const char *key) {
    const char *why = not_honoured_why(key);
    return why ? why : "not a feature of ted";
}
static const char *sched_name_of(int kind);
static int validate_checkpoint_model(const Config *c, const char *path);

// Stores one value of a known key.
// "pipeline.layers": block counts per stage, or "auto".
static int apply_pp_layers(Config *c, const cJSON *j, const char *key, const char *file) {
    int n = cJSON_GetArraySize(j), rc;
    double d;
    if (cJSON_IsString(j) && !strcmp(j->valuestring, "auto")) { c->pp_auto = 1; c->pp_nlayers = 0; return 0; }
    if (!cJSON_IsArray(j) || n < 1 || n > (int)(sizeof c->pp_layers / sizeof c->pp_layers[0]))
        return type_error(file, key, "an array of 1 to 256 block counts, or \"auto\"", j);
    c->pp_auto = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = json_integer(cJSON_GetArrayItem(j, i), 1, INT_MAX, &d)) != 0)
            return integer_error(file, key, rc, "[1, 2^31-1] for every entry", cJSON_GetArrayItem(j, i));
        c->pp_layers[i] = (int)d;
    }
    c->pp_nlayers = n;
    return 0;
}

// The keys whose value is one of a few names: the optimizer, compression, offload device,
// schedulers, pipeline schedule, router, expert kind, architecture, data order.
static int apply_name(Config *c, const cJSON *j, const JKey *k, const char *key, const char *file) {
    const char *v = cJSON_IsString(j) ? j->valuestring : NULL;
    int i = -1;
    switch (k->kind) {
    case J_ORDER:
        if (!v || (strcmp(v, "sequential") != 0 && strcmp(v, "shuffled") != 0))
            return type_error(file, key, "\"sequential\" or \"shuffled\"", j);
        *FIELD(c, k->off, int) = strcmp(v, "sequential") == 0;
        return 0;
    case J_OPTIMIZER_TYPE:
        if (!v || (strcasecmp(v, "AdamW") != 0 && strcasecmp(v, "OneBitAdam") != 0))
            return type_error(file, key, "\"AdamW\" or \"OneBitAdam\"", j);
        c->onebit = strcasecmp(v, "OneBitAdam") == 0;
        return 0;
    case J_COMPRESSION:
        if (!v || (strcmp(v, "sign") != 0 && strcmp(v, "none") != 0)) return type_error(file, key, "\"sign\" or \"none\"", j);
        *FIELD(c, k->off, int) = strcmp(v, "sign") == 0;
        return 0;
    case J_OFFLOAD_DEVICE:
        if (!v || (strcmp(v, "cpu") != 0 && strcmp(v, "none") != 0)) return type_error(file, key, "\"cpu\" or \"none\"", j);
        *FIELD(c, k->off, int) = strcmp(v, "cpu") == 0;
        return 0;
    case J_SCHEDULER_TYPE:
        for (i = 0; v && i < SCHED_KINDS; i++)
            if (!strcasecmp(v, sched_names[i])) { c->sched.type = i; return 0; }
        return type_error(file, key, "\"WarmupCosine\", \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"", j);
    case J_WARMUP_TYPE:
        if (!v || (strcmp(v, "log") != 0 && strcmp(v, "linear") != 0)) return type_error(file, key, "\"log\" or \"linear\"", j);
        *FIELD(c, k->off, int) = strcmp(v, "linear") == 0;
        return 0;
    case J_PP_SCHEDULE:
        if (!v || config_pp_schedule(v) < 0) return type_error(file, key, "\"gpipe\", \"1f1b\" or \"interleaved\"", j);
        *FIELD(c, k->off, int) = config_pp_schedule(v);
        return 0;
    case J_ROUTER:
        if (v) i = name_index(router_names, ROUTER_KINDS, v);
        if (i < 0) return type_error(file, key, "\"topk\", \"noisy_topk\", \"switch\", \"gshard\", \"expert_choice\" or \"mixtral\"", j);
        break;
    case J_EXPERT_TYPE:
        if (v) i = name_index(expert_type_names, EXPERT_KINDS, v);
        if (i < 0) return type_error(file, key, "\"gelu\" or \"swiglu\"", j);
        break;
    case J_ARCH:
        if (v) i = name_index(arch_names, ARCH_KINDS, v);
        if (i < 0) return type_error(file, key, "\"gpt2\" or \"llama\"", j);
        break;
    default:
        return -1;
    }
    *FIELD(c, k->off, int) = i;
    return 0;
}

static int apply_value(Config *c, const cJSON *j, const JKey *k, const char *key, const char *file) {
    double d;
    float f;
    int rc;
    switch (k->kind) {
    case J_INT:
        if ((rc = json_integer(j, INT_MIN, INT_MAX, &d)) != 0) return integer_error(file, key, rc, "[-2^31, 2^31-1]", j);
        *FIELD(c, k->off, int) = (int)d;
        return 0;
    case J_LONG:
        if ((rc = json_integer(j, 0, 9007199254740992.0, &d)) != 0) return integer_error(file, key, rc, "[0, 2^53]", j);
        *FIELD(c, k->off, long) = (long)d;
        return 0;
    case J_SEED:
        if ((rc = json_integer(j, 0, 9007199254740992.0, &d)) != 0) return integer_error(file, key, rc, "[0, 2^53]", j);
        *FIELD(c, k->off, uint64_t) = (uint64_t)d;
        return 0;
    case J_FLOAT:
    case J_MIN_LR:
        if (json_float(j, &f) != 0) return type_error(file, key, "a number", j);
        *FIELD(c, k->off, float) = f;
        if (k->kind == J_MIN_LR) c->min_lr_set = 1;
        return 0;
    case J_BOOL:
        if (!cJSON_IsBool(j)) return type_error(file, key, "true or false", j);
        *FIELD(c, k->off, int) = cJSON_IsTrue(j);
        return 0;
    case J_SECTION:
        if (!cJSON_IsObject(j)) return type_error(file, key, "an object", j);
        return walk(c, j, k->section, key, file);
    case J_ORDER:
    case J_OPTIMIZER_TYPE:
    case J_COMPRESSION:
    case J_OFFLOAD_DEVICE:
    case J_SCHEDULER_TYPE:
    case J_WARMUP_TYPE:
    case J_PP_SCHEDULE:
    case J_ROUTER:
    case J_EXPERT_TYPE:
    case J_ARCH:
        return apply_name(c, j, k, key, file);
    case J_PP_LAYERS:
        return apply_pp_layers(c, j, key, file);
    case J_BETAS: {
        float b1, b2;
        if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 || json_float(cJSON_GetArrayItem(j, 0), &b1) != 0 ||
            json_float(cJSON_GetArrayItem(j, 1), &b2) != 0)
            return type_error(file, key, "an array of two numbers", j);
        c->beta1 = b1;
        c->beta2 = b2;
        return 0;
    }
    case J_OFF_ONLY:   // a DeepSpeed feature ted does not have: false is what ted does
        if (!cJSON_IsBool(j)) return type_error(file, key, "true or false", j);
        if (cJSON_IsTrue(j)) key_problem("\"%s\" true (ted cannot honour it: %s)", key, off_only_why(key));
        return 0;
    case J_COMMENT:
        return cJSON_IsString(j) ? 0 : type_error(file, key, "a string", j);
    case J_PATH:
    case J_NAME: {   // a folder path (511 bytes at most), or a job name (127, no "/")
        size_t max = k->kind == J_PATH ? 511 : 127;
        if (!cJSON_IsString(j) || strlen(j->valuestring) > max || (k->kind == J_NAME && strchr(j->valuestring, '/')))
            return type_error(file, key, k->kind == J_PATH ? "a path of at most 511 bytes" : "a name of at most 127 bytes without \"/\"", j);
        strcpy(FIELD(c, k->off, char), j->valuestring);
        return 0;
    }
    case J_SPARSE:
        return sparse_config_json(FIELD(c, k->off, SparseConfig), j, key, file, sparse_unknown);
    }
    return -1;
}

static const JKey *find_key(const JKey *keys, const char *name) {
    for (const JKey *k = keys; k->name; k++)
        if (strcmp(k->name, name) == 0) return k;
    return NULL;
}

// Levenshtein distance of two short names (longer ones count as far apart).
static int edit_distance(const char *a, const char *b) {
    int n = (int)strlen(a), m = (int)strlen(b), row[65];
    if (n > 64 || m > 64) return 1000;
    for (int j = 0; j <= m; j++) row[j] = j;
    for (int i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= m; j++) {
            int up = row[j], best = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

// A near name: within one edit, or a quarter of the name's length.
static int near_name(const char *typed, const char *name) {
    int d = edit_distance(typed, name), len = (int)strlen(typed);
    return d <= 1 || d <= len / 4;
}

static const JKey *walk_root;   // the key table of the file being read (for "did you mean" elsewhere)

// The full path of a key of this name in another section of the table (prefix + ...), or 0.
static int find_elsewhere(const JKey *keys, const char *name, const char *prefix, char *out, size_t n) {
    for (const JKey *k = keys; k->name; k++) {
        char path[160];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->name);
        if (!strcmp(k->name, name)) { snprintf(out, n, "%s", path); return 1; }
        if (k->kind == J_SECTION && find_elsewhere(k->section, name, path, out, n)) return 1;
    }
    return 0;
}

// " (did you mean \"x\"?)" for an unknown key: the nearest name of its section, else the same
// name in another section; "" when there is none.
static void did_you_mean(const JKey *keys, const char *name, const char *prefix, char *out, size_t n) {
    const JKey *best = NULL;
    int bd = 1000;
    for (const JKey *k = keys; k->name; k++) {
        int d = edit_distance(name, k->name);
        if (d < bd && near_name(name, k->name)) { bd = d; best = k; }
    }
    char path[160];
    out[0] = 0;
    if (best) snprintf(out, n, " (did you mean \"%s%s%s\"?)", prefix, *prefix ? "." : "", best->name);
    else if (walk_root && find_elsewhere(walk_root, name, "", path, sizeof path))
        snprintf(out, n, " (did you mean \"%s\"?)", path);
}

// An unknown key of the sparse_attention section (read by sparse_config.c): noted like the others.
static void sparse_unknown(const char *section, const char *name) {
    const char *best = NULL;
    int bd = 1000;
    for (const char *const *k = sparse_config_keys; *k; k++) {
        int d = edit_distance(name, *k);
        if (d < bd && near_name(name, *k)) { bd = d; best = *k; }
    }
    char hint[200], path[160];
    hint[0] = 0;
    if (best) snprintf(hint, sizeof hint, " (did you mean \"%s.%s\"?)", section, best);
    else if (walk_root && find_elsewhere(walk_root, name, "", path, sizeof path))
        snprintf(hint, sizeof hint, " (did you mean \"%s\"?)", path);
    key_problem("unknown key \"%s.%s\"%s", section, name, hint);
}

// Applies every member of obj. An unknown member is noted (key_problem) and the walk goes on, so
// that one line can report them all; a bad value stops it at once.
static int walk(Config *c, const cJSON *obj, const JKey *keys, const char *prefix, const char *file) {
    for (const cJSON *j = obj->child; j; j = j->next) {
        char key[256], hint[200];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", j->string);
        const JKey *k = find_key(keys, j->string);
        if (!k) {
            const char *why = not_honoured_why(key);
            if (why) key_problem("\"%s\" (ted cannot honour it: %s)", key, why);
            else {
                did_you_mean(keys, j->string, prefix, hint, sizeof hint);
                key_problem("unknown key \"%s\"%s", key, hint);
            }
            continue;
        }
        if (k->kind != J_SECTION) mark_given(key);
        if (apply_value(c, j, k, key, file) != 0) return -1;
    }
    return 0;
}

// Walks a whole file from its root table; the key problems, if any, in one line.
static int walk_file(Config *c, const cJSON *root, const JKey *keys, const char *file) {
    key_problems.n = 0;
    key_problems.text[0] = 0;
    walk_root = keys;
    int rc = walk(c, root, keys, "", file);
    walk_root = NULL;
    if (rc == 0 && key_problems.n == 1) ted_error("%s: %s", file, key_problems.text);
    else if (rc == 0 && key_problems.n > 1)
        ted_error("%s: %d keys ted does not know or cannot honour: %s", file, key_problems.n, key_problems.text);
    if (rc == 0 && key_problems.n) rc = -1;
    return rc;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

// The first key that appears twice in one object anywhere under j (cJSON keeps both), or NULL.
static const char *duplicate_key(const cJSON *j) {
    int n = 0;
    for (const cJSON *e = j->child; e; e = e->next) n++;
    const char *dup = NULL;
    if (cJSON_IsObject(j) && n > 1) {
        const cJSON **v = ted_alloc(sizeof *v * (size_t)n, MEM_TEMP);
        n = 0;
        for (const cJSON *e = j->child; e; e = e->next) v[n++] = e;
        qsort(v, (size_t)n, sizeof *v, cmp_key);
        for (int i = 1; i < n && !dup; i++)
            if (strcmp(v[i - 1]->string, v[i]->string) == 0) dup = v[i]->string;
        ted_free(v);
    }
    for (const cJSON *e = j->child; e && !dup; e = e->next) dup = duplicate_key(e);
    return dup;
}

// Reads and parses a JSON file whose top level is an object; NULL after one error line.
static cJSON *parse_json_file(const char *path) {
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) { ted_error("%s: cannot read: %s", path, strerror(errno)); return NULL; }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line = 1, col = 1;
        for (const char *p = text; end && p < end && p < text + len; p++) {
            if (*p == '\n') { line++; col = 1; } else col++;
        }
        if (len == 0) ted_error("%s: malformed JSON: the file is empty", path);
        else ted_error("%s: malformed JSON near line %d, column %d", path, line, col);
    } else if (!cJSON_IsObject(root)) {
        ted_error("%s: the top level must be a JSON object", path);
        cJSON_Delete(root);
        root = NULL;
    } else if (duplicate_key(root)) {
        ted_error("%s: key \"%.100s\" appears twice in one object", path, duplicate_key(root));
        cJSON_Delete(root);
        root = NULL;
    }
    ted_free(text);
    return root;
}

int config_load_json(Config *c, const char *path) {
    cJSON *root = parse_json_file(path);
    if (!root) return -1;
    int rc = walk_file(c, root, top_keys, path);
    cJSON_Delete(root);
    resolve_min_lr(c);
    // DeepSpeed's schedulers warm up over 1000 steps unless told (ted's WarmupCosine: 100)
    if (c->sched.type != SCHED_WARMUP_COSINE && !given("scheduler.params.warmup_num_steps")) c->warmup = 1000;
    return rc;
}

// The Hugging Face keys a checkpoint's config.json carries beside the flat keys (written by
// io/hfconfig.c): the reader of the flat keys passes over them.
static const char *const hf_keys[] = {
    "model_type", "architectures", "n_ctx", "activation_function", "layer_norm_epsilon", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "initializer_range", "scale_attn_weights", "bos_token_id",
    "eos_token_id", "torch_dtype", "use_cache", "ted_note",
    // Llama's and Mixtral's (docs/llama.md); tie_word_embeddings, rms_norm_eps, rope_theta are ted's keys too
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "max_position_embeddings", "hidden_act", "attention_bias", "attention_dropout", "pretraining_tp", "rope_scaling",
    "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits", "sliding_window",
    // Qwen2-MoE's (num_experts and qkv_bias are ted's keys too)
    "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
    "mlp_only_layers", "use_sliding_window", "max_window_layers", NULL
};

static void hf_config_strip(cJSON *root) {
    for (int i = 0; hf_keys[i]; i++) cJSON_DeleteItemFromObjectCaseSensitive(root, hf_keys[i]);
}

// Moves the members of the CONFIG_TED_SECTION object to the top level (a config.json written
// before the section has them there already); -1 after one line on a clash or a wrong type.
static int unnest_ted_section(cJSON *root, const char *path) {
    cJSON *ted = cJSON_DetachItemFromObjectCaseSensitive(root, CONFIG_TED_SECTION);
    if (!ted) return 0;
    int rc = 0;
    if (!cJSON_IsObject(ted)) rc = type_error(path, CONFIG_TED_SECTION, "an object", ted);
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
    cJSON *root = parse_json_file(path);
    return root ? load_model_root(c, root, path) : -1;
}

int config_load_model_text(Config *c, const char *text, const char *path) {
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) { ted_error("%s: the model keys are not a JSON object", path); cJSON_Delete(root); return -1; }
    return load_model_root(c, root, path);
}

// Takes root (deletes it); the model keys, checked as a checkpoint's.
static int load_model_root(Config *c, cJSON *root, const char *path) {
    if (unnest_ted_section(root, path) != 0) { cJSON_Delete(root); return -1; }
    hf_config_strip(root);   // the Hugging Face keys a checkpoint's config.json carries too
    Config tmp = *c;
    sparse_config_defaults(&tmp.sparse);   // no section: dense
    arch_defaults(&tmp.model);             // no llama keys: a gpt2 checkpoint
    int rc = walk_file(&tmp, root, flat_model_keys, path);
    for (const JKey *k = flat_model_keys; rc == 0 && k < flat_model_keys + N_FLAT_REQUIRED; k++) {
        if (!cJSON_GetObjectItemCaseSensitive(root, k->name)) {
            ted_error("%s: missing key \"%s\"", path, k->name);
            rc = -1;
        }
    }
    cJSON_Delete(root);
    if (rc == 0) rc = validate_checkpoint_model(&tmp, path);   // the training config's rules
    if (rc == 0) {
        c->model = tmp.model;
        c->seq_len = tmp.seq_len;
        c->sparse = tmp.sparse;
    }
    return rc;
}

// The shortest decimal form that reads back as the same float.
static void format_float(char *buf, size_t n, float v) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

char *config_model_json(const Config *c) {
    const ModelConfig *m = &c->model;
    size_t cap = 8192, len = 0;
    char *out = ted_alloc(cap, MEM_TEMP);
    char num[64];
    len += (size_t)snprintf(out + len, cap - len, "{\n");
#define PUT_INT(name, value) \
    len += (size_t)snprintf(out + len, cap - len, "  \"%s\": %d,\n", name, value);
#define PUT_FLOAT(name, value) \
    format_float(num, sizeof num, value); \
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
    PUT_INT("n_inner", cfg_ffn(m))
    MOE_FIELDS(PUT)
    char sparse[4096];
    sparse_config_write(&c->sparse, c->seed, sparse, sizeof sparse);
    if (sparse[0]) len += (size_t)snprintf(out + len, cap - len, "  \"sparse_attention\": %s,\n", sparse);
    ROUTE_FIELDS(PUT)
    if (cfg_is_llama(m)) { ARCH_FIELDS(PUT) }   // a gpt2 checkpoint's config.json stays as it was
    len += (size_t)snprintf(out + len, cap - len, "  \"seq_len\": %d\n}\n", c->seq_len > 0 ? c->seq_len : m->n_positions);
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

// ---------------------------------------------------------------------------------------
// Flags

typedef enum { F_INT, F_LONG, F_FLOAT, F_SEED, F_STRING, F_SWITCH, F_ORDER, F_MIN_LR, F_CONFIG, F_DEVICE, F_PP_SCHEDULE,
               F_ROUTER, F_EXPERT_TYPE, F_ARCH } FKind;

typedef struct {
    const char *flag;
    FKind kind;
    size_t off;
    const char *metavar;
    const char *json;      // the JSON key it overrides (NULL: flag only)
    const char *deflt;     // the default in words, when printing the value is not enough
    const char *help;
} Flag;

static const Flag flags[] = {
    {"--config", F_CONFIG, 0, "FILE", NULL, "none", "JSON config, read first; flags override it"},
    {"--data", F_STRING, CF(data), "FILE", NULL, "none", "training data: text (bytes) or *.bin token shards"},
    {"--steps", F_INT, CF(steps), "N", "train_steps", NULL, "optimizer steps"},
    {"--micro-batch", F_INT, CF(micro_batch), "N", "train_micro_batch_size_per_gpu", NULL, "sequences per micro-step per data-parallel rank"},
    {"--grad-accum", F_INT, CF(grad_accum), "N", "gradient_accumulation_steps", NULL, "micro-steps per step"},
    {"--train-batch-size", F_INT, CF(train_batch_size), "N", "train_batch_size", "0: not checked", "global batch; must equal micro-batch x grad-accum x dp"},
    {"--lr", F_FLOAT, CF(lr), "X", "optimizer.params.lr", NULL, "peak learning rate"},
    {"--min-lr", F_MIN_LR, CF(min_lr), "X", "scheduler.params.min_lr", "lr/10", "final learning rate of the cosine decay"},
    {"--warmup", F_INT, CF(warmup), "N", "scheduler.params.warmup_num_steps", NULL, "linear warm-up steps"},
    {"--weight-decay", F_FLOAT, CF(weight_decay), "X", "optimizer.params.weight_decay", NULL, "AdamW decoupled weight decay (tensors of >= 2 dims)"},
    {"--clip", F_FLOAT, CF(clip), "X", "gradient_clipping", NULL, "global gradient-norm clipping (<= 0: off)"},
    {"--seed", F_SEED, CF(seed), "N", "seed", NULL, "seed of the initial weights and of the data order"},
    {"--data-order", F_ORDER, CF(data_sequential), "ORDER", "data_order", "shuffled", "sequential or shuffled"},
    {"--log", F_STRING, CF(log), "FILE", NULL, "none", "metrics, one JSON object per line"},
    {"--save", F_STRING, CF(save), "DIR", NULL, "none", "checkpoint directory"},
    {"--save-every", F_INT, CF(save_every), "N", "save_every", "0: at the end only", "save a checkpoint every N steps"},
    {"--resume", F_STRING, CF(resume), "DIR", NULL, "none", "resume from this checkpoint"},
    {"--init-from", F_STRING, CF(init_from), "DIR", NULL, "none", "start from the weights of a ted or Hugging Face GPT-2 folder (fresh optimizer, step 0)"},
    {"--eval-every", F_INT, CF(eval_every), "N", "eval_every", "0: at the end only", "evaluate every N steps"},
    {"--eval-windows", F_INT, CF(eval_windows), "N", "eval_windows", "0: all", "validation windows per evaluation"},
    {"--tp", F_INT, CF(tp), "N", "tp", NULL, "tensor-parallel degree"},
    {"--ep", F_INT, CF(ep), "N", "ep", NULL, "expert-parallel degree"},
    {"--pp", F_INT, CF(pp), "N", "pp", NULL, "pipeline stages"},
    {"--pp-schedule", F_PP_SCHEDULE, CF(pp_schedule), "S", "pipeline.schedule", "1f1b", "gpipe, 1f1b or interleaved"},
    {"--pp-virtual", F_INT, CF(pp_virtual), "V", "pipeline.virtual_stages", NULL, "chunks per stage (interleaved)"},
    {"--seq-len", F_INT, CF(seq_len), "N", "seq_len", "n_positions", "tokens per training sequence"},
    {"--log-every", F_INT, CF(log_every), "N", "log_every", NULL, "progress line every N steps"},
    {"--sample-every", F_INT, CF(sample_every), "N", "sample_every", "0: never", "print a sample every N steps"},
    {"--threads", F_INT, CF(threads), "N", "threads", "0: OpenMP default", "OpenMP threads"},
    {"--device", F_DEVICE, CF(device), "DEV", NULL, "cpu", "cpu, or cuda: model, optimizer and collectives on this rank's GPU"},
    {"--peak-tflops", F_FLOAT, CF(peak_tflops), "X", NULL, "0: measured", "peak TFLOP/s per process that MFU is against"},
    {"--zero-stage", F_INT, CF(zero_stage), "N", "zero_optimization.stage", NULL, "ZeRO stage: 0 all-reduce, 1 optimizer state sharded, 2 gradients too"},
    {"--overlap-comm", F_SWITCH, CF(overlap_comm), NULL, "zero_optimization.overlap_comm", "off", "gradient reductions during the backward, parameter gathers ahead of the forward"},
    {"--tile-size", F_LONG, CF(tile_size), "N", "optimizer.tile_size", NULL, "elements per tile of the tiled optimizer (0: off)"},
    {"--vocab-size", F_INT, CF(model.vocab_size), "N", "model.vocab_size", NULL, "vocabulary size V"},
    {"--n-positions", F_INT, CF(model.n_positions), "N", "model.n_positions", NULL, "maximum sequence length"},
    {"--n-embd", F_INT, CF(model.n_embd), "N", "model.n_embd", NULL, "model width d"},
    {"--n-layer", F_INT, CF(model.n_layer), "N", "model.n_layer", NULL, "transformer blocks L"},
    {"--n-head", F_INT, CF(model.n_head), "N", "model.n_head", NULL, "attention heads"},
    {"--n-inner", F_INT, CF(model.n_inner), "N", "model.n_inner", "4*n_embd", "FFN hidden size"},
    {"--num-experts", F_INT, CF(model.num_experts), "N", "moe.num_experts", NULL, "experts per MoE block (1: dense)"},
    {"--top-k", F_INT, CF(model.top_k), "N", "moe.top_k", NULL, "experts chosen per token"},
    {"--moe-every", F_INT, CF(model.moe_every), "N", "moe.moe_every", NULL, "block i is MoE when (i+1) % N == 0"},
    {"--capacity-factor", F_FLOAT, CF(model.capacity_factor), "X", "moe.capacity_factor", NULL, "expert capacity factor (<= 0: dropless)"},
    {"--min-capacity", F_INT, CF(model.min_capacity), "N", "moe.min_capacity", NULL, "minimum expert capacity"},
    {"--group-size", F_INT, CF(model.group_size), "N", "moe.group_size", NULL, "sequences per routing group"},
    {"--aux-coef", F_FLOAT, CF(model.aux_coef), "X", "moe.aux_coef", NULL, "load-balancing loss coefficient"},
    {"--z-coef", F_FLOAT, CF(model.z_coef), "X", "moe.z_coef", NULL, "router z-loss coefficient"},
    {"--router", F_ROUTER, CF(model.router), "NAME", "moe.router", "topk", "topk, noisy_topk, switch, gshard, expert_choice or mixtral"},
    {"--use-rts", F_SWITCH, CF(model.use_rts), NULL, "moe.use_rts", "off", "random token selection for capacity slots"},
    {"--jitter-eps", F_FLOAT, CF(model.jitter_eps), "X", "moe.jitter_eps", NULL, "switch: router input jitter U(1-X, 1+X) in training"},
    {"--importance-coef", F_FLOAT, CF(model.importance_coef), "X", "moe.importance_coef", NULL, "noisy_topk: CV(importance)^2 loss coefficient"},
    {"--load-coef", F_FLOAT, CF(model.load_coef), "X", "moe.load_coef", NULL, "noisy_topk: CV(load)^2 loss coefficient"},
    {"--bias-update-rate", F_FLOAT, CF(model.bias_update_rate), "X", "moe.bias_update_rate", "0: off", "aux-loss-free balancing: bias step per optimizer step"},
    {"--num-groups", F_INT, CF(model.num_groups), "N", "moe.num_groups", NULL, "group-limited routing: expert groups"},
    {"--topk-groups", F_INT, CF(model.topk_groups), "N", "moe.topk_groups", NULL, "group-limited routing: groups a token may use"},
    {"--shared-experts", F_INT, CF(model.shared_experts), "N", "moe.shared_experts", NULL, "always-on expert of N*expert_inner hidden units"},
    {"--topk-renorm", F_INT, CF(model.topk_renorm), "0|1", "moe.topk_renorm", "1", "0: the k gates are the chosen probabilities, unrenormalised (topk, mixtral)"},
    {"--shared-expert-gate", F_SWITCH, CF(model.shared_expert_gate), NULL, "moe.shared_expert_gate", "off", "scale the shared expert by sigmoid(x.w) (Qwen2-MoE)"},
    {"--expert-inner", F_INT, CF(model.expert_inner), "N", "moe.expert_inner", "n_inner", "expert hidden size f_e"},
    {"--arch", F_ARCH, CF(model.arch), "A", "model.arch", NULL, "block family: gpt2 or llama (docs/llama.md)"},
    {"--n-kv-head", F_INT, CF(model.n_kv_head), "N", "model.n_kv_head", "n_head", "llama: key/value heads (grouped-query attention)"},
    {"--rope-theta", F_FLOAT, CF(model.rope_theta), "X", "model.rope_theta", NULL, "llama: rotary embedding base"},
    {"--qkv-bias", F_SWITCH, CF(model.qkv_bias), NULL, "model.qkv_bias", "off", "llama: biases on q, k, v (Qwen2)"},
    {"--rms-norm-eps", F_FLOAT, CF(model.rms_norm_eps), "X", "model.rms_norm_eps", NULL, "llama: RMSNorm eps"},
    {"--expert-type", F_EXPERT_TYPE, CF(model.expert_type), "KIND", "moe.expert_type", "gelu", "expert kind: gelu or swiglu"},
    {"--bf16", F_SWITCH, CF(bf16), NULL, "bf16.enabled", "off", "bf16 mixed precision"},
    {"--fp16", F_SWITCH, CF(fp16), NULL, "fp16.enabled", "off", "fp16 mixed precision with loss scaling"},
    {"--activation-checkpointing", F_SWITCH, CF(activation_checkpointing), NULL, "activation_checkpointing.enabled", "off", "recompute blocks in backward"},
    {"--dtd", F_SWITCH, CF(dtd), NULL, "dtd", "off", "duplicate token dropping"},
    {"--cac", F_SWITCH, CF(cac), NULL, "cac", "off", "communication-aware checkpointing"},
    {"--overlap-degree", F_INT, CF(overlap_degree), "N", "moe.overlap_degree", "1", "expert-parallel exchange in N chunks, overlapped with the experts"},
    {"--progress-thread", F_SWITCH, CF(progress_thread), NULL, "moe.progress_thread", "off", "a thread moves the chunks' messages while the experts run"},
    {"--keep-last", F_INT, CF(keep_last), "N", NULL, "0: all", "keep only the N newest checkpoints in --save"},
    {"--overwrite", F_SWITCH, CF(overwrite), NULL, NULL, "off", "take over a --save folder or --log file of another run"},
    {"--watchdog", F_INT, CF(watchdog), "SECONDS", NULL, NULL, "a collective not done in this time ends the job, naming it (0: off)"},
    {"--tensorboard-dir", F_STRING, CF(tensorboard_dir), "DIR", NULL, "none", "TensorBoard event files of the run's metrics in DIR (Megatron's flag)"},
    {"--log-tensors", F_SWITCH, CF(log_tensors), NULL, NULL, "off", "log each tensor's gradient norm and each MoE block's tokens per expert"},
    {"--debug-expert-grad-scale", F_FLOAT, CF(debug_expert_grad_scale), "X", NULL, NULL, "debugging: multiply expert gradients by X (a deliberate bug)"},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

static const Flag *find_flag(const char *name, size_t len) {
    for (int i = 0; i < N_FLAGS; i++)
        if (strlen(flags[i].flag) == len && strncmp(flags[i].flag, name, len) == 0) return &flags[i];
    return NULL;
}

// Strict number parsing: the whole string, no leading space. 0, -1 when not an integer,
// -2 when out of [lo, hi].
static int parse_long(const char *s, long lo, long hi, long *out) {
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end) return -1;
    if (errno == ERANGE || v < lo || v > hi) return -2;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float *out) {
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || fabs(v) > FLT_MAX) return -1;
    *out = (float)v;
    return 0;
}

static int parse_seed(const char *s, uint64_t *out) {
    if (!isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE) return -1;
    *out = v;
    return 0;
}

static int bad_value(const Flag *f, const char *want, const char *v) {
    ted_error("%s: expected %s, got \"%s\"", f->flag, want, v);
    return -1;
}

// Stores the value of one flag.
static int apply_flag(Config *c, const Flag *f, const char *v) {
    long l;
    int rc;
    switch (f->kind) {
    case F_INT:
        if ((rc = parse_long(v, INT_MIN, INT_MAX, &l)) != 0)
            return bad_value(f, rc == -2 ? "an integer in [-2^31, 2^31-1]" : "an integer", v);
        *FIELD(c, f->off, int) = (int)l;
        return 0;
    case F_LONG:
        if (parse_long(v, 0, LONG_MAX, &l) != 0) return bad_value(f, "a non-negative integer", v);
        *FIELD(c, f->off, long) = l;
        return 0;
    case F_FLOAT:
    case F_MIN_LR:
        if (parse_float(v, FIELD(c, f->off, float)) != 0) return bad_value(f, "a number", v);
        if (f->kind == F_MIN_LR) c->min_lr_set = 1;
        return 0;
    case F_SEED:
        if (parse_seed(v, FIELD(c, f->off, uint64_t)) != 0) return bad_value(f, "an integer between 0 and 2^64-1", v);
        return 0;
    case F_STRING:
        if (!*v) return bad_value(f, "a path", v);
        if (strlen(v) >= sizeof c->data) { ted_error("%s: path longer than %zu bytes", f->flag, sizeof c->data - 1); return -1; }
        strcpy(FIELD(c, f->off, char), v);
        return 0;
    case F_DEVICE:
        if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return bad_value(f, "cpu or cuda", v);
        *FIELD(c, f->off, int) = strcmp(v, "cuda") == 0;
        return 0;
    case F_ROUTER:
        if ((rc = name_index(router_names, ROUTER_KINDS, v)) < 0)
            return bad_value(f, "topk, noisy_topk, switch, gshard, expert_choice or mixtral", v);
        *FIELD(c, f->off, int) = rc;
        return 0;
    case F_ARCH:
        if ((rc = name_index(arch_names, ARCH_KINDS, v)) < 0) return bad_value(f, "gpt2 or llama", v);
        *FIELD(c, f->off, int) = rc;
        return 0;
    case F_EXPERT_TYPE:
        if ((rc = name_index(expert_type_names, EXPERT_KINDS, v)) < 0) return bad_value(f, "gelu or swiglu", v);
        *FIELD(c, f->off, int) = rc;
        return 0;
    case F_ORDER:
        if (strcmp(v, "sequential") != 0 && strcmp(v, "shuffled") != 0) return bad_value(f, "sequential or shuffled", v);
        *FIELD(c, f->off, int) = strcmp(v, "sequential") == 0;
        return 0;
    case F_CONFIG:
        return *v ? 0 : bad_value(f, "a file", v);
    case F_PP_SCHEDULE:
        if (config_pp_schedule(v) < 0) return bad_value(f, "gpipe, 1f1b or interleaved", v);
        *FIELD(c, f->off, int) = config_pp_schedule(v);
        return 0;
    case F_SWITCH:
        *FIELD(c, f->off, int) = 1;
        return 0;
    }
    return -1;
}

// Megatron-LM's and nanoGPT's names for ted's flags (nanoGPT's with "_" also match by the rule
// that "_" reads as "-").
static const char *const foreign_flags[][3] = {
    {"--num-layers", "--n-layer", "Megatron"}, {"--hidden-size", "--n-embd", "Megatron"},
    {"--num-attention-heads", "--n-head", "Megatron"}, {"--ffn-hidden-size", "--n-inner", "Megatron"},
    {"--seq-length", "--seq-len", "Megatron"}, {"--max-position-embeddings", "--n-positions", "Megatron"},
    {"--tensor-model-parallel-size", "--tp", "Megatron"}, {"--pipeline-model-parallel-size", "--pp", "Megatron"},
    {"--expert-model-parallel-size", "--ep", "Megatron"}, {"--virtual-pipeline-model-parallel-size", "--pp-virtual", "Megatron"},
    {"--micro-batch-size", "--micro-batch", "Megatron"}, {"--global-batch-size", "--train-batch-size", "Megatron"},
    {"--train-iters", "--steps", "Megatron"}, {"--lr-warmup-iters", "--warmup", "Megatron"},
    {"--clip-grad", "--clip", "Megatron"}, {"--save-interval", "--save-every", "Megatron"},
    {"--eval-interval", "--eval-every", "Megatron and nanoGPT"}, {"--log-interval", "--log-every", "Megatron and nanoGPT"},
    {"--eval-iters", "--eval-windows", "Megatron and nanoGPT"},
    {"--load", "--resume", "Megatron"}, {"--data-path", "--data", "Megatron"}, {"--moe-router-topk", "--top-k", "Megatron"},
    {"--moe-aux-loss-coeff", "--aux-coef", "Megatron"}, {"--moe-z-loss-coeff", "--z-coef", "Megatron"},
    {"--recompute-activations", "--activation-checkpointing", "Megatron"},
    {"--block-size", "--seq-len", "nanoGPT"}, {"--batch-size", "--micro-batch", "nanoGPT"},
    {"--gradient-accumulation-steps", "--grad-accum", "nanoGPT"}, {"--max-iters", "--steps", "nanoGPT"},
    {"--learning-rate", "--lr", "nanoGPT"}, {"--warmup-iters", "--warmup", "nanoGPT"}, {"--grad-clip", "--clip", "nanoGPT"},
    {"--out-dir", "--save", "nanoGPT"},
};

// The line for an unknown flag: another trainer's name mapped, "_" read as "-", or the nearest flag.
static void unknown_flag(const char *arg, size_t len) {
    char name[80];
    snprintf(name, sizeof name, "%.*s", (int)(len < 79 ? len : 79), arg);
    for (char *p = name + 2; *p; p++)
        if (*p == '_') *p = '-';
    for (size_t i = 0; i < sizeof foreign_flags / sizeof foreign_flags[0]; i++)
        if (!strcmp(foreign_flags[i][0], name)) {
            ted_error("unknown flag %.*s: %s's name; ted's is %s (see ted train --help)", (int)len, arg, foreign_flags[i][2],
                      foreign_flags[i][1]);
            return;
        }
    const Flag *best = find_flag(name, strlen(name));
    int bd = best ? 0 : 1000;
    for (int i = 0; !best && i < N_FLAGS; i++) {
        int d = edit_distance(name + 2, flags[i].flag + 2);
        if (d < bd && near_name(name + 2, flags[i].flag + 2)) { bd = d; best = &flags[i]; }
    }
    if (best) ted_error("unknown flag %.*s (did you mean %s? see ted train --help)", (int)len, arg, best->flag);
    else ted_error("unknown flag %.*s (see ted train --help)", (int)len, arg);
}

int config_apply_flags(Config *c, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !arg[2]) { ted_error("unexpected argument \"%s\"", arg); return -1; }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const Flag *f = find_flag(arg, name_len);
        if (!f) { unknown_flag(arg, name_len); return -1; }
        const char *value;
        if (f->kind == F_SWITCH) {
            if (eq) { ted_error("%s takes no value", f->flag); return -1; }
            value = "";
        } else if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0) { ted_error("%s: missing value", f->flag); return -1; }
            value = argv[++i];
        }
        if (apply_flag(c, f, value) != 0) return -1;
        if (f->json) mark_given(f->json);
    }
    resolve_min_lr(c);
    if (c->seq_len == 0) c->seq_len = c->model.n_positions;
    if (c->cac) c->activation_checkpointing = 1;   // communication-aware checkpointing is checkpointing
    return 0;
}

// Prints a flag's default from the defaults themselves.
static void format_default(const Flag *f, Config *d, char *buf, size_t n) {
    if (f->deflt) { snprintf(buf, n, "%s", f->deflt); return; }
    switch (f->kind) {
    case F_INT: snprintf(buf, n, "%d", *FIELD(d, f->off, int)); break;
    case F_LONG: snprintf(buf, n, "%ld", *FIELD(d, f->off, long)); break;
    case F_FLOAT: case F_MIN_LR: snprintf(buf, n, "%g", (double)*FIELD(d, f->off, float)); break;
    case F_SEED: snprintf(buf, n, "%llu", (unsigned long long)*FIELD(d, f->off, uint64_t)); break;
    default: snprintf(buf, n, "none"); break;
    }
}

static char format_value(const Flag *f, const Config *c, char *buf, size_t n) {
    switch (f->kind) {
    case F_INT: snprintf(buf, n, "%d", *FIELD(c, f->off, int)); return 'n';
    case F_LONG: snprintf(buf, n, "%ld", *FIELD(c, f->off, long)); return 'n';
    case F_FLOAT: case F_MIN_LR: format_float(buf, n, *FIELD(c, f->off, float)); return 'n';
    case F_SEED: snprintf(buf, n, "%llu", (unsigned long long)*FIELD(c, f->off, uint64_t)); return 'n';
    case F_SWITCH: snprintf(buf, n, "%s", *FIELD(c, f->off, int) ? "true" : "false"); return 'b';
    case F_ORDER: snprintf(buf, n, "%s", *FIELD(c, f->off, int) ? "sequential" : "shuffled"); return 's';
    case F_DEVICE: snprintf(buf, n, "%s", *FIELD(c, f->off, int) ? "cuda" : "cpu"); return 's';
    case F_PP_SCHEDULE: snprintf(buf, n, "%s", sched_name_of(*FIELD(c, f->off, int))); return 's';
    case F_ROUTER: snprintf(buf, n, "%s", router_names[*FIELD(c, f->off, int)]); return 's';
    case F_EXPERT_TYPE: snprintf(buf, n, "%s", expert_type_names[*FIELD(c, f->off, int)]); return 's';
    case F_ARCH: snprintf(buf, n, "%s", arch_names[*FIELD(c, f->off, int)]); return 's';
    case F_STRING: snprintf(buf, n, "%s", FIELD(c, f->off, char)); return 's';
    case F_CONFIG: break;   // every kind is listed: a new one is a -Wswitch warning here
    }
    snprintf(buf, n, "?");
    return 's';
}

static int flag_has_json(const char *path) {
    for (int i = 0; i < N_FLAGS; i++) if (flags[i].json && !strcmp(flags[i].json, path)) return 1;
    return 0;
}

static void put_ints(char *buf, size_t n, const int *x, int count) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < count && len < n; i++) len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? ", " : "", x[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

// The value of a JSON key (not a section) as the run record prints it; 0 for keys that set nothing.
static char json_key_value(const Config *c, const JKey *k, char *buf, size_t n) {
    char b1[32], b2[32];
    switch (k->kind) {
    case J_INT: snprintf(buf, n, "%d", *FIELD(c, k->off, int)); return 'n';
    case J_LONG: snprintf(buf, n, "%ld", *FIELD(c, k->off, long)); return 'n';
    case J_SEED: snprintf(buf, n, "%llu", (unsigned long long)*FIELD(c, k->off, uint64_t)); return 'n';
    case J_FLOAT: case J_MIN_LR: format_float(buf, n, *FIELD(c, k->off, float)); return 'n';
    case J_BOOL: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "true" : "false"); return 'b';
    case J_ORDER: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "sequential" : "shuffled"); return 's';
    case J_OPTIMIZER_TYPE: snprintf(buf, n, "%s", c->onebit ? "OneBitAdam" : "AdamW"); return 's';
    case J_SCHEDULER_TYPE: snprintf(buf, n, "%s", sched_names[c->sched.type]); return 's';
    case J_WARMUP_TYPE: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "linear" : "log"); return 's';
    case J_PATH: case J_NAME: snprintf(buf, n, "%s", FIELD(c, k->off, char)); return 's';
    case J_COMPRESSION: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "sign" : "none"); return 's';
    case J_OFFLOAD_DEVICE: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "cpu" : "none"); return 's';
    case J_PP_SCHEDULE: snprintf(buf, n, "%s", sched_name_of(*FIELD(c, k->off, int))); return 's';
    case J_PP_LAYERS: put_ints(buf, n, c->pp_layers, c->pp_nlayers); return 'r';
    case J_ROUTER: snprintf(buf, n, "%s", router_names[*FIELD(c, k->off, int)]); return 's';
    case J_EXPERT_TYPE: snprintf(buf, n, "%s", expert_type_names[*FIELD(c, k->off, int)]); return 's';
    case J_ARCH: snprintf(buf, n, "%s", arch_names[*FIELD(c, k->off, int)]); return 's';
    case J_BETAS:
        format_float(b1, sizeof b1, c->beta1);
        format_float(b2, sizeof b2, c->beta2);
        snprintf(buf, n, "[%s, %s]", b1, b2);
        return 'r';
    case J_SPARSE:
        sparse_config_write(FIELD(c, k->off, SparseConfig), c->seed, buf, (int)n);
        if (!buf[0]) snprintf(buf, n, "{\"mode\": \"dense\"}");
        return 'r';
    case J_SECTION: case J_OFF_ONLY: case J_COMMENT: break;
    }   // every kind is listed: a new one is a -Wswitch warning here
    return 0;
}

// Every JSON key that no flag sets, named by its dotted path: whatever the walker can set, the run
// record prints (and the ranks agree on) without a list of its own.
static void each_json_key(const Config *c, const JKey *keys, const char *prefix, SettingFn fn, void *ctx, char *v, size_t n) {
    for (const JKey *k = keys; k->name; k++) {
        char path[160];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->name);
        if (k->kind == J_SECTION) { each_json_key(c, k->section, path, fn, ctx, v, n); continue; }
        char type = flag_has_json(path) ? 0 : json_key_value(c, k, v, n);
        if (type) fn(ctx, path, path, v, type);
    }
}

void config_each_setting(const Config *c, SettingFn fn, void *ctx) {
    enum { V = 8192 };
    char *v = ted_alloc(V, MEM_TEMP);
    for (int i = 0; i < N_FLAGS; i++) {
        if (flags[i].kind == F_CONFIG) continue;
        char type = format_value(&flags[i], c, v, V);
        fn(ctx, flags[i].flag + 2, flags[i].json, v, type);
    }
    each_json_key(c, top_keys, "", fn, ctx, v, V);
    ted_free(v);
}

void config_print_train_help(void) {
    Config d;
    config_defaults(&d);
    printf("usage: ted train [--config FILE] [--data FILE] [options]\n\n"
           "Trains a (MoE) GPT model. A JSON config (DeepSpeed-like keys, plus \"model\" and \"moe\"\n"
           "sections) is read first; each flag below overrides the JSON key shown.\n\n");
    for (int i = 0; i < N_FLAGS; i++) {
        const Flag *f = &flags[i];
        char left[64], def[64];
        snprintf(left, sizeof left, "%s%s%s", f->flag, f->metavar ? " " : "", f->metavar ? f->metavar : "");
        format_default(f, &d, def, sizeof def);
        if (f->json) printf("  %-28s %s [default %s; JSON %s]\n", left, f->help, def, f->json);
        else printf("  %-28s %s [default %s; flag only]\n", left, f->help, def);
    }
    printf("\nJSON only: optimizer.params.betas [%g, %g], optimizer.params.eps %g, zero_optimization.reduce_bucket_size %ld,\n"
           "  zero_optimization.offload_optimizer.device \"none\" (or \"cpu\"), optimizer.type \"AdamW\" (or \"OneBitAdam\",\n"
           "  with optimizer.params.freeze_step %d and optimizer.params.compression \"sign\" or \"none\"),\n"
           "  scheduler.type \"WarmupCosine\" (or DeepSpeed's \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\" with their\n"
           "  params), fp16.loss_scale initial_scale_power loss_scale_window hysteresis consecutive_hysteresis\n"
           "  min_loss_scale (DeepSpeed's loss scaler), steps_per_print, wall_clock_breakdown, and the tensorboard and\n"
           "  csv_monitor sections (enabled, output_path, job_name). docs/config.md describes every key.\n",
           (double)d.beta1, (double)d.beta2, (double)d.eps, d.reduce_bucket_size, d.freeze_step);
}

// ---------------------------------------------------------------------------------------
// Validation

// The file a config being validated came from (a checkpoint's config.json), or NULL
// (flags and the training JSON: the key itself names the setting).
static const char *validating = NULL;

static void invalid(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void invalid(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (validating) ted_error("%s: invalid config: %s", validating, msg);
    else ted_error("invalid config: %s", msg);
}

#define RULE(bad, ...) do { if (bad) { invalid(__VA_ARGS__); return -1; } } while (0)

// Bounds that keep every int index and every size product of the code in range; the
// products themselves are checked in 64 bits below.
#define MAX_POSITIONS (1 << 20)
#define MAX_WIDTH (1 << 20)
#define MAX_LAYERS 4096
#define MAX_EXPERTS 65536
#define MAX_TENSORS (1L << 20)

// The widths that size the expert tensors, named: expert_inner, and the shared expert's
// shared_experts × expert_inner hidden units, each (times n_embd) within an int tensor.
static int validate_expert_sizes(const ModelConfig *m, int64_t d, int64_t fe) {
    RULE(m->expert_inner < 0 || m->expert_inner > 4 * MAX_WIDTH, "expert_inner (%d) must be in [0, %d] (0 = n_inner)",
         m->expert_inner, 4 * MAX_WIDTH);
    RULE(m->shared_experts < 0, "shared_experts (%d) must be >= 0", m->shared_experts);
    int64_t fs = (int64_t)m->shared_experts * fe;
    RULE(fs > 4 * MAX_WIDTH, "shared_experts (%d) x expert_inner (%lld) = %lld hidden units of the shared expert, more "
         "than %d", m->shared_experts, (long long)fe, (long long)fs, 4 * MAX_WIDTH);
    RULE(d * fe > INT_MAX, "expert_inner (%lld) x n_embd (%lld) = %lld elements per expert tensor exceeds 2^31-1",
         (long long)fe, (long long)d, (long long)(d * fe));
    RULE(d * fs > INT_MAX, "shared_experts (%d) x expert_inner (%lld) x n_embd (%lld) = %lld elements per shared-expert "
         "tensor exceeds 2^31-1", m->shared_experts, (long long)fe, (long long)d, (long long)(d * fs));
    return 0;
}

// 64-bit size products of every key that sizes a tensor: the largest tensor, the tensor count,
// the expert widths.
static int validate_sizes(const ModelConfig *m) {
    int64_t d = m->n_embd, f = m->n_inner > 0 ? m->n_inner : 4 * d, V = m->vocab_size, E = m->num_experts;
    int64_t fe = m->expert_inner > 0 ? m->expert_inner : f;
    int64_t tensors = 4 + (int64_t)m->n_layer * (11 + 4 * E);   // the parameter registry's room
    RULE(tensors > MAX_TENSORS, "n_layer %d with num_experts %lld needs room for %lld tensors (at most %ld)", m->n_layer,
         (long long)E, (long long)tensors, MAX_TENSORS);
    int64_t big = V * d > d * f ? V * d : d * f;
    if ((int64_t)m->n_positions * d > big) big = (int64_t)m->n_positions * d;
    RULE(big > INT_MAX, "a tensor of %lld elements (vocab_size, n_positions or n_inner times n_embd) exceeds 2^31-1",
         (long long)big);
    // the memory these sizes need, per rank of the layout, is checked by ted train before it
    // allocates (model/memplan.h)
    return validate_expert_sizes(m, d, fe);
}

// The block family (docs/llama.md): llama's own keys, and what gpt2 does not have.
static int validate_arch(const ModelConfig *m) {
    int kv = cfg_kv_heads(m);
    RULE(m->n_kv_head < 0, "n_kv_head (%d) must be >= 0 (0 = n_head)", m->n_kv_head);
    if (!cfg_is_llama(m)) {
        RULE(kv != m->n_head, "n_kv_head (%d) needs model.arch llama (gpt2 has one key/value head per head)", kv);
        RULE(!m->tie_word_embeddings, "tie_word_embeddings false needs model.arch llama (gpt2's head is wte)");
        RULE(m->qkv_bias, "qkv_bias needs model.arch llama (gpt2's attention has its biases)");
        return 0;
    }
    RULE(m->n_head % kv != 0, "n_kv_head (%d) must divide n_head (%d)", kv, m->n_head);
    RULE((m->n_embd / m->n_head) % 2 != 0, "model.arch llama: the head size n_embd/n_head (%d) must be even (rotary pairs)",
         m->n_embd / m->n_head);
    RULE(!(m->rms_norm_eps > 0), "rms_norm_eps (%g) must be > 0", (double)m->rms_norm_eps);
    RULE(!(m->rope_theta > 1), "rope_theta (%g) must be > 1", (double)m->rope_theta);
    RULE(m->num_experts > 1 && m->expert_type != EXPERT_SWIGLU,
         "model.arch llama: moe.expert_type must be swiglu (Mixtral's w1/w3/w2 experts), not %s", expert_type_names[m->expert_type]);
    return 0;
}

static int validate_model(const ModelConfig *m) {
    RULE(m->vocab_size < 2 || m->vocab_size > 65536, "vocab_size (%d) must be in [2, 65536] (token shards are uint16)", m->vocab_size);
    RULE(m->n_positions < 1 || m->n_positions > MAX_POSITIONS, "n_positions (%d) must be in [1, %d]", m->n_positions, MAX_POSITIONS);
    RULE(m->n_embd < 1 || m->n_embd > MAX_WIDTH, "n_embd (%d) must be in [1, %d]", m->n_embd, MAX_WIDTH);
    RULE(m->n_layer < 1 || m->n_layer > MAX_LAYERS, "n_layer (%d) must be in [1, %d]", m->n_layer, MAX_LAYERS);
    RULE(m->n_head < 1, "n_head (%d) must be >= 1", m->n_head);
    RULE(m->n_embd % m->n_head != 0, "n_embd (%d) is not a multiple of n_head (%d)", m->n_embd, m->n_head);
    RULE(m->n_inner < 0 || m->n_inner > 4 * MAX_WIDTH, "n_inner (%d) must be in [0, %d] (0 = 4*n_embd)", m->n_inner, 4 * MAX_WIDTH);
    RULE(m->num_experts < 1 || m->num_experts > MAX_EXPERTS, "num_experts (%d) must be in [1, %d]", m->num_experts, MAX_EXPERTS);
    RULE(m->moe_every < 1, "moe_every (%d) must be >= 1", m->moe_every);
    RULE(isnan(m->capacity_factor), "capacity_factor must be a number");
    if (m->num_experts > 1) {   // a dense model has no experts: the MoE keys have no effect (config_warn_unused)
        RULE(!(m->capacity_factor <= m->num_experts), "capacity_factor (%g) must be <= num_experts (%d): beyond that no "
             "token is dropped (<= 0 is dropless)", (double)m->capacity_factor, m->num_experts);
        RULE(m->top_k < 1, "top_k (%d) must be >= 1", m->top_k);
        RULE(m->top_k > m->num_experts, "top_k (%d) > num_experts (%d)", m->top_k, m->num_experts);
    }
    RULE(m->min_capacity < 0, "min_capacity (%d) must be >= 0", m->min_capacity);
    RULE(m->group_size < 1, "group_size (%d) must be >= 1", m->group_size);
    RULE(!(m->aux_coef >= 0), "aux_coef (%g) must be >= 0", (double)m->aux_coef);
    RULE(!(m->z_coef >= 0), "z_coef (%g) must be >= 0", (double)m->z_coef);
    if (validate_arch(m) != 0) return -1;
    return validate_sizes(m);
}

static int validate_training(const Config *c) {
    const ModelConfig *m = &c->model;
    RULE(c->seq_len < 0, "seq_len (%d) must be >= 1 (0 = n_positions)", c->seq_len);
    RULE(c->seq_len > m->n_positions, "seq_len (%d) > n_positions (%d)", c->seq_len, m->n_positions);
    RULE(c->micro_batch < 1, "micro_batch (%d) must be >= 1", c->micro_batch);
    RULE(c->micro_batch % m->group_size != 0, "micro_batch (%d) is not a multiple of group_size (%d)", c->micro_batch, m->group_size);
    RULE(c->grad_accum < 1, "grad_accum (%d) must be >= 1", c->grad_accum);
    RULE(c->steps < 0, "steps (%d) must be >= 0", c->steps);
    RULE(!(c->lr >= 0), "lr (%g) must be >= 0", (double)c->lr);
    RULE(!(c->min_lr >= 0), "min_lr (%g) must be >= 0", (double)c->min_lr);
    RULE(c->warmup < 0, "warmup (%d) must be >= 0", c->warmup);
    RULE(!(c->beta1 >= 0 && c->beta1 < 1), "beta1 (%g) must be in [0, 1)", (double)c->beta1);
    RULE(!(c->beta2 >= 0 && c->beta2 < 1), "beta2 (%g) must be in [0, 1)", (double)c->beta2);
    RULE(!(c->eps > 0), "eps (%g) must be > 0", (double)c->eps);
    RULE(!(c->weight_decay >= 0), "weight_decay (%g) must be >= 0", (double)c->weight_decay);
    RULE(c->zero_stage < 0 || c->zero_stage > 2, "zero_optimization.stage (%d) not supported (0, 1 or 2)", c->zero_stage);
    RULE(c->reduce_bucket_size < 1, "zero_optimization.reduce_bucket_size (%ld) must be >= 1", c->reduce_bucket_size);
    RULE(c->onebit && c->zero_stage != 0, "OneBitAdam needs zero_optimization.stage 0 (given %d)", c->zero_stage);
    RULE(c->onebit && c->freeze_step < 1, "optimizer.params.freeze_step (%d) must be >= 1 (v is frozen from the warm-up)",
         c->freeze_step);
    RULE(c->onebit && c->device == 1, "OneBitAdam runs on the CPU only (--device cuda given)");
    RULE(c->overlap_degree < 1 || c->overlap_degree > 64, "moe.overlap_degree (%d) must be in [1, 64]", c->overlap_degree);
    RULE(c->overlap_degree > 1 && c->device == 1, "moe.overlap_degree %d runs on the CPU only (--device cuda given)",
         c->overlap_degree);
    RULE(c->progress_thread && c->overlap_degree <= 1, "moe.progress_thread needs moe.overlap_degree > 1 (it moves the chunks)");
    RULE(c->overlap_comm && c->device == 1, "zero_optimization.overlap_comm runs on the CPU only (--device cuda given)");
    RULE(c->overlap_comm && c->onebit, "zero_optimization.overlap_comm is not supported with OneBitAdam (its "
         "compressed all-reduce runs after the backward)");
    RULE(c->overlap_comm && c->debug_expert_grad_scale != 1.0f, "zero_optimization.overlap_comm is not supported with "
         "--debug-expert-grad-scale (it scales gradients that are already travelling)");
    RULE(c->sparse.recompute && c->device == 1, "sparse_attention.recompute runs on the CPU only (--device cuda given)");
    RULE(c->bf16 && c->fp16, "bf16 and fp16 are both enabled");
    RULE(c->tile_size < 0, "tile_size (%ld) must be >= 0 (0 turns tiling off)", c->tile_size);
    RULE(c->save_every < 0, "save_every (%d) must be >= 0", c->save_every);
    RULE(c->eval_every < 0, "eval_every (%d) must be >= 0", c->eval_every);
    RULE(c->eval_windows < 0, "eval_windows (%d) must be >= 0", c->eval_windows);
    RULE(c->log_every < 0, "log_every (%d) must be >= 0", c->log_every);
    RULE(c->sample_every < 0, "sample_every (%d) must be >= 0", c->sample_every);
    RULE(c->threads < 0, "threads (%d) must be >= 0", c->threads);
    RULE(c->train_batch_size < 0, "train_batch_size (%d) must be >= 0", c->train_batch_size);
    RULE(!(c->peak_tflops >= 0), "peak_tflops (%g) must be >= 0", (double)c->peak_tflops);
    RULE(c->keep_last < 0, "--keep-last (%d) must be >= 0", c->keep_last);
    RULE(c->watchdog < 0, "--watchdog (%d) must be >= 0 seconds", c->watchdog);
    RULE(!(c->debug_expert_grad_scale > 0), "--debug-expert-grad-scale (%g) must be > 0", (double)c->debug_expert_grad_scale);
    return 0;
}

static int validate_layout(const Config *c) {
    const ModelConfig *m = &c->model;
    RULE(c->tp < 1, "tp (%d) must be >= 1", c->tp);
    RULE(c->ep < 1, "ep (%d) must be >= 1", c->ep);
    RULE(m->num_experts % c->ep != 0, "num_experts (%d) is not a multiple of ep (%d)", m->num_experts, c->ep);
    RULE(m->n_head % c->tp != 0, "n_head (%d) is not a multiple of tp (%d)", m->n_head, c->tp);
    RULE(cfg_ffn(m) % c->tp != 0, "FFN size (%d) is not a multiple of tp (%d)", cfg_ffn(m), c->tp);
    RULE(cfg_is_llama(m) && cfg_kv_heads(m) % c->tp != 0,
         "n_kv_head (%d) is not a multiple of tp (%d): tensor parallelism splits llama's attention by key/value head",
         cfg_kv_heads(m), c->tp);
    RULE(cfg_is_llama(m) && c->device == 1, "model.arch llama runs on the CPU only for now (--device cuda given)");
    return 0;
}

// The pipeline (design §6): L blocks in pp·v chunks, the schedule's own conditions.
static int validate_pipeline(const Config *c) {
    int L = c->model.n_layer, v = c->pp_virtual;
    RULE(c->pp < 1, "pp (%d) must be >= 1", c->pp);
    RULE(c->pp > 1 && c->zero_stage == 2, "zero_optimization.stage 2 is not supported with pp > 1 (the tied wte is "
         "summed between stages after the backward; use stage 0 or 1)");
    RULE(c->pp > 1 && c->onebit, "OneBitAdam is not supported with pp > 1");
    int one_in_flight = c->pp == 1 && c->pp_schedule != PP_GPIPE;
    RULE(!one_in_flight && c->model.router == ROUTER_NOISY_TOPK,
         "moe.router noisy_topk keeps one micro-batch's noise per block: not with pp > 1 or the gpipe schedule");
    RULE(!one_in_flight && c->model.router == ROUTER_SWITCH && c->model.jitter_eps > 0,
         "moe.router switch with jitter keeps one micro-batch's input per block: not with pp > 1 or the gpipe schedule");
    RULE(c->pp > 1 && c->log_tensors, "--log-tensors is not supported with pp > 1 (each stage holds other tensors)");
    RULE(v < 1, "pipeline.virtual_stages (%d) must be >= 1", v);
    RULE(v > 1 && c->pp_schedule != PP_INTERLEAVED, "pipeline.virtual_stages %d needs the interleaved schedule", v);
    RULE(c->pp_schedule == PP_INTERLEAVED && (c->pp < 2 || v < 2),
         "the interleaved schedule needs pp >= 2 and pipeline.virtual_stages >= 2 (given %d and %d)", c->pp, v);
    RULE((long)c->pp * v > L, "pp x virtual_stages = %ld chunks but the model has %d blocks (n_layer)", (long)c->pp * v, L);
    RULE(c->pp_schedule == PP_INTERLEAVED && c->grad_accum % c->pp != 0,
         "the interleaved schedule needs gradient_accumulation_steps (%d) to be a multiple of pp (%d)", c->grad_accum, c->pp);
    if (c->pp_nlayers) {
        long sum = 0;
        for (int i = 0; i < c->pp_nlayers; i++) sum += c->pp_layers[i];
        RULE(c->pp_nlayers != c->pp * v, "pipeline.layers has %d entries, pp x virtual_stages is %d", c->pp_nlayers, c->pp * v);
        RULE(sum != L, "pipeline.layers adds up to %ld blocks, the model has %d", sum, L);
    }
    return 0;
}

// The routing family (docs/config.md, Routers and experts): ranges, then the combinations that cannot work.
static int validate_routing(const Config *c) {
    const ModelConfig *m = &c->model;
    int E = m->num_experts, k = m->top_k;
    const char *r = router_names[m->router];
    RULE(!(m->jitter_eps >= 0 && m->jitter_eps < 1), "jitter_eps (%g) must be in [0, 1)", (double)m->jitter_eps);
    RULE(!(m->importance_coef >= 0), "importance_coef (%g) must be >= 0", (double)m->importance_coef);
    RULE(!(m->load_coef >= 0), "load_coef (%g) must be >= 0", (double)m->load_coef);
    RULE(!(m->bias_update_rate >= 0), "bias_update_rate (%g) must be >= 0", (double)m->bias_update_rate);
    RULE(m->num_groups < 1, "num_groups (%d) must be >= 1", m->num_groups);
    RULE(m->topk_groups < 1 || m->topk_groups > m->num_groups, "topk_groups (%d) must be in [1, num_groups %d]",
         m->topk_groups, m->num_groups);
    RULE(m->shared_experts < 0, "shared_experts (%d) must be >= 0", m->shared_experts);
    RULE(m->expert_inner < 0, "expert_inner (%d) must be >= 0 (0 = n_inner)", m->expert_inner);
    RULE(m->shared_expert_gate && (E <= 1 || m->shared_experts == 0),
         "shared_expert_gate scales the shared expert: it needs num_experts > 1 and shared_experts > 0");
    RULE(m->topk_renorm != 0 && m->topk_renorm != 1, "topk_renorm (%d) must be 0 or 1", m->topk_renorm);
    if (E <= 1) return 0;
    RULE(!m->topk_renorm && m->router != ROUTER_TOPK && m->router != ROUTER_MIXTRAL,
         "topk_renorm false (unrenormalised gates) is for router topk or mixtral, not %s", r);
    RULE(cfg_expert_inner(m) % c->tp != 0, "expert_inner (%d) is not a multiple of tp (%d)", cfg_expert_inner(m), c->tp);
    RULE(m->router == ROUTER_SWITCH && k != 1, "router switch routes top-1: top_k must be 1 (got %d)", k);
    RULE(m->router == ROUTER_GSHARD && k != 2, "router gshard routes top-2: top_k must be 2 (got %d)", k);
    RULE(m->router == ROUTER_NOISY_TOPK && k >= E, "router noisy_topk needs top_k (%d) < num_experts (%d) for its load loss", k, E);
    RULE(E % m->num_groups != 0, "num_experts (%d) is not a multiple of num_groups (%d)", E, m->num_groups);
    RULE(k > m->topk_groups * (E / m->num_groups), "top_k (%d) > the experts of topk_groups (%d) groups of %d", k,
         m->topk_groups, E / m->num_groups);
    RULE(m->use_rts && m->capacity_factor <= 0, "use_rts orders capacity slots: it needs capacity_factor > 0 (not dropless)");
    if (m->router == ROUTER_EXPERT_CHOICE) {
        RULE(m->use_rts, "router expert_choice has experts choose tokens: use_rts does not apply");
        RULE(m->capacity_factor <= 0, "router expert_choice needs capacity_factor > 0 (each expert takes C tokens)");
        RULE(m->num_groups > 1, "router expert_choice chooses tokens per expert: group-limited routing does not apply");
        RULE(m->bias_update_rate > 0, "router expert_choice: a per-expert bias cannot change an expert's choice of tokens");
    }
    if (c->device == 1) {   // the GPU backend has the §2 router and the gelu expert
        RULE(m->router != ROUTER_TOPK || m->use_rts || m->bias_update_rate > 0 || m->num_groups > 1,
             "--device cuda: moe.router %s%s%s%s runs on the CPU only for now", r, m->use_rts ? " with use_rts" : "",
             m->bias_update_rate > 0 ? " with bias balancing" : "", m->num_groups > 1 ? " with num_groups" : "");
        RULE(!m->topk_renorm, "--device cuda: moe.topk_renorm false runs on the CPU only for now");
        RULE(m->expert_type != EXPERT_GELU || m->shared_experts > 0,
             "--device cuda: expert_type %s / shared_experts %d run on the CPU only for now",
             expert_type_names[m->expert_type], m->shared_experts);
    }
    return 0;
}

static const char *sched_name_of(int kind) {
    return kind == PP_GPIPE ? "gpipe" : kind == PP_1F1B ? "1f1b" : "interleaved";
}

int config_pp_schedule(const char *name) {
    if (!strcmp(name, "gpipe")) return PP_GPIPE;
    if (!strcmp(name, "1f1b")) return PP_1F1B;
    if (!strcmp(name, "interleaved")) return PP_INTERLEAVED;
    return -1;
}

// A checkpoint's config.json: the model rules and seq_len, each line naming the file.
static int validate_checkpoint_model(const Config *c, const char *path) {
    validating = path;
    int rc = validate_model(&c->model);
    if (!rc && (c->seq_len < 1 || c->seq_len > c->model.n_positions)) {
        invalid("seq_len (%d) must be in [1, n_positions %d]", c->seq_len, c->model.n_positions);
        rc = -1;
    }
    validating = NULL;
    return rc;
}

// The parameters each scheduler takes (DeepSpeed refuses others: its schedulers are called with
// scheduler.params as keyword arguments); "warmup_num_steps" is every type's.
static const char *const sched_params[SCHED_KINDS] = {
    "min_lr", "warmup_min_lr warmup_max_lr warmup_type", "warmup_min_lr warmup_max_lr warmup_type total_num_steps",
    "warmup_min_ratio cos_min_ratio warmup_type total_num_steps"};

static int validate_schedule(const Config *c) {
    static const char *const all[] = {"min_lr", "warmup_min_lr", "warmup_max_lr", "warmup_type", "total_num_steps",
                                      "warmup_min_ratio", "cos_min_ratio"};
    const SchedConfig *s = &c->sched;
    const char *name = sched_names[s->type];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char path[64], word[32];
        snprintf(path, sizeof path, "scheduler.params.%s", all[i]);
        snprintf(word, sizeof word, "%s", all[i]);
        int takes = 0;
        for (const char *p = sched_params[s->type]; (p = strstr(p, word)); p += strlen(word))
            if ((p == sched_params[s->type] || p[-1] == ' ') && (p[strlen(word)] == ' ' || !p[strlen(word)])) takes = 1;
        RULE(given(path) && !takes, "%s is not a parameter of scheduler %s (it takes warmup_num_steps %s)", path, name,
             sched_params[s->type]);
    }
    if (s->type == SCHED_WARMUP_COSINE) return 0;
    RULE(c->warmup < 1, "scheduler %s needs warmup_num_steps >= 1 (given %d)", name, c->warmup);
    RULE(s->type != SCHED_WARMUP_LR && s->total_num_steps < 1, "scheduler %s needs scheduler.params.total_num_steps "
         ">= 1 (given %d)", name, s->total_num_steps);
    RULE(!(s->warmup_min_lr >= 0), "scheduler.params.warmup_min_lr (%g) must be >= 0", (double)s->warmup_min_lr);
    RULE(given("scheduler.params.warmup_max_lr") && !(s->warmup_max_lr >= 0),
         "scheduler.params.warmup_max_lr (%g) must be >= 0", (double)s->warmup_max_lr);
    RULE(!(s->warmup_min_ratio >= 0), "scheduler.params.warmup_min_ratio (%g) must be >= 0", (double)s->warmup_min_ratio);
    RULE(!(s->cos_min_ratio >= 0), "scheduler.params.cos_min_ratio (%g) must be >= 0", (double)s->cos_min_ratio);
    return 0;
}

// fp16's loss scaler, DeepSpeed's keys and ranges.
static int validate_scaler(const LossScaleConfig *s) {
    RULE(!(s->loss_scale >= 0), "fp16.loss_scale (%g) must be >= 0 (0: dynamic)", (double)s->loss_scale);
    RULE(s->initial_scale_power < 0 || s->initial_scale_power > 64, "fp16.initial_scale_power (%d) must be in [0, 64]",
         s->initial_scale_power);
    RULE(s->window < 1, "fp16.loss_scale_window (%d) must be >= 1", s->window);
    RULE(s->hysteresis < 1, "fp16.hysteresis (%d) must be >= 1", s->hysteresis);
    RULE(!(s->min_scale > 0), "fp16.min_loss_scale (%g) must be > 0", (double)s->min_scale);
    RULE(s->loss_scale == 0 && s->min_scale > ldexp(1.0, s->initial_scale_power),
         "fp16.min_loss_scale (%g) is above the initial scale 2^%d", (double)s->min_scale, s->initial_scale_power);
    return 0;
}

int config_validate(const Config *c) {
    if (validate_model(&c->model) != 0) return -1;
    if (validate_training(c) != 0) return -1;
    if (validate_schedule(c) != 0 || validate_scaler(&c->scaler) != 0) return -1;
    if (validate_layout(c) != 0) return -1;
    if (validate_pipeline(c) != 0) return -1;
    if (sparse_config_validate(&c->sparse, c->seq_len > 0 ? c->seq_len : c->model.n_positions) != 0) return -1;
    return validate_routing(c);
}

// ---------------------------------------------------------------------------------------
// Keys of a switched-off feature

// One rule for every section: a key given (in the JSON or by its flag) whose feature is off is
// accepted, and a warning names it and says why it has no effect — so that one flag can switch
// a feature off (--num-experts 1 on an MoE config) without editing the file.
typedef struct { const char *prefix; int off; const char *why; const char *except; } OffFeature;

static void warn_group(const OffFeature *f, FILE *out) {
    char names[1024] = "";
    size_t n = 0, plen = strlen(f->prefix);
    int count = 0;
    for (int i = 0; i < n_given && n < sizeof names - 100; i++) {
        const char *k = given_keys[i];
        if (strncmp(k, f->prefix, plen) != 0 || (f->except && strstr(f->except, k + plen))) continue;
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", count ? ", " : "", k);
        count++;
    }
    if (count) fprintf(out, "warning: %s %s no effect: %s\n", names, count > 1 ? "have" : "has", f->why);
}

void config_warn_unused(const Config *c, FILE *out) {
    if (!out) return;
    const ModelConfig *m = &c->model;
    const OffFeature off[] = {
        {"moe.", m->num_experts == 1, "num_experts is 1 (a dense model)", "num_experts"},
        {"moe.jitter_eps", m->num_experts > 1 && m->router != ROUTER_SWITCH, "only router switch jitters its input", NULL},
        {"moe.importance_coef", m->num_experts > 1 && m->router != ROUTER_NOISY_TOPK, "only router noisy_topk has that loss", NULL},
        {"moe.load_coef", m->num_experts > 1 && m->router != ROUTER_NOISY_TOPK, "only router noisy_topk has that loss", NULL},
        {"moe.topk_groups", m->num_experts > 1 && m->num_groups == 1, "num_groups is 1 (no group-limited routing)", NULL},
        {"optimizer.params.freeze_step", !c->onebit, "optimizer.type is AdamW (freeze_step is OneBitAdam's)", NULL},
        {"optimizer.params.compression", !c->onebit, "optimizer.type is AdamW (compression is OneBitAdam's)", NULL},
        {"fp16.", !c->fp16, "fp16 is not enabled", "enabled"},
        {"zero_optimization.reduce_bucket_size", c->zero_stage != 2, "the buckets are ZeRO stage 2's", NULL},
        {"pipeline.virtual_stages", c->pp == 1, "pp is 1 (no pipeline)", NULL},
        {"pipeline.layers", c->pp == 1, "pp is 1 (no pipeline)", NULL},
        {"model.rope_theta", !cfg_is_llama(m), "model.arch is gpt2 (learned positions)", NULL},
        {"model.rms_norm_eps", !cfg_is_llama(m), "model.arch is gpt2 (LayerNorm, eps 1e-5)", NULL},
    };
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (off[i].off) warn_group(&off[i], out);
}
