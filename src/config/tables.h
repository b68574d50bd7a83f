// tables.h — what the files of config/ share among themselves (no other room includes it): the
// tables that describe the JSON keys (json_keys.c) and the flags (flags.c), one entry per setting
// with the field of Config it sets, and the helpers their readers, writers and rules have in common.
#pragma once
#include <stddef.h>
#include "config/config.h"

#define CF(field) offsetof(Config, field)
#define FIELD(c, off, type) ((type *)((char *)(c) + (off)))

// clang-format off
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
// clang-format on

// clang-format off
// How a JSON key's value is read, checked and stored.
typedef enum {
    J_INT, J_LONG, J_FLOAT, J_BOOL, J_SEED, J_SECTION, J_ORDER, J_OPTIMIZER_TYPE,
    J_SCHEDULER_TYPE, J_PP_SCHEDULE, J_PP_LAYERS, J_ROUTER, J_EXPERT_TYPE, J_ARCH, J_BETAS, J_COMPRESSION, J_OFFLOAD_DEVICE,
    J_MIN_LR, J_WARMUP_TYPE, J_OFF_ONLY, J_NO_EFFECT, J_ADAM_W_MODE, J_COMMENT, J_SPARSE, J_PATH, J_NAME
} JKind;
// clang-format on

typedef struct JKey {
    const char *name;
    JKind kind;
    size_t off;                   // field of Config (scalar kinds)
    const struct JKey *section;   // keys of a nested object (J_SECTION)
} JKey;

// The training config's keys (json_keys.c), from the top level.
extern const JKey config_top_keys[];
// A checkpoint's config.json: model and moe keys flat, plus seq_len; the first
// CONFIG_FLAT_REQUIRED keys must be present, the routing family's may be missing (older checkpoints).
extern const JKey config_flat_keys[];
#define COUNT_KEY(name, kind) +1
enum { CONFIG_FLAT_REQUIRED = 1 MODEL_FIELDS(COUNT_KEY) MOE_FIELDS(COUNT_KEY) };
// Why ted does not honour a DeepSpeed key it knows (NULL: it is not one of them).
const char *config_not_honoured(const char *key);
// The DeepSpeed keys accepted with no effect (J_NO_EFFECT), i = 0, 1, ... until NULL: the key,
// what ted does in its place (why), and which value asks for what ted does anyway (*ted_does:
// 't' true, 'f' false, 'n' none: a number that ted has no use for).
const char *config_no_effect_key(int i, char *ted_does, const char **why);

// How a flag's value is read, checked and stored.
typedef enum {
    F_INT,
    F_LONG,
    F_FLOAT,
    F_SEED,
    F_STRING,
    F_SWITCH,
    F_ORDER,
    F_MIN_LR,
    F_CONFIG,
    F_DEVICE,
    F_PP_SCHEDULE,
    F_ROUTER,
    F_EXPERT_TYPE,
    F_ARCH
} FKind;

typedef struct {
    const char *flag;
    FKind kind;
    size_t off;
    const char *metavar;
    const char *json;    // the JSON key it overrides (NULL: flag only)
    const char *deflt;   // the default in words, when printing the value is not enough
    const char *help;
} Flag;

// ted train's flags (flags.c), in the order --help prints them.
extern const Flag config_flags[];
extern const int config_nflags;

// The keys given since config_defaults (JSON keys by their full path, flags by the JSON key they
// override) and the flags given (by name): the rules that depend on whether a key was given (a
// scheduler parameter of another type, a key of a switched-off feature) and the origin of each
// setting read them (settings.c).
void config_mark_json(const char *path);
void config_mark_flag(const Flag *f);
int config_given(const char *path);        // by the JSON or by a flag
int config_json_given(const char *path);   // by the JSON
int config_flag_given(const char *name);   // the flag --name
int config_given_count(void);
const char *config_given_key(int i);
void config_given_clear(void);

// The index of name in names[n], or -1.
int config_name_index(const char *const *names, int n, const char *name);
// "gpipe", "1f1b", "interleaved" for PP_*.
const char *config_pp_schedule_name(int kind);
// The shortest decimal form that reads back as the same float.
void config_format_float(char *buf, size_t n, float v);
// Levenshtein distance of two short names (longer ones count as far apart), and whether typed is
// near name (within one edit, or a quarter of its length).
int config_edit_distance(const char *a, const char *b);
int config_near_name(const char *typed, const char *name);
// The block family's keys (ARCH_FIELDS) as a gpt2 model has them.
void config_arch_defaults(ModelConfig *m);
// min_lr follows lr (a tenth of lr as written) until it is given.
void config_follow_lr(Config *c);

// JSON reading (json.c), shared with the checkpoint's flat config (flat.c). Every problem of a
// walk (a key twice in one object, a value of the wrong type or range, an unknown key, a key ted
// cannot honour, two names of one setting with different values) is gathered into one line.
#include <cjson/cJSON.h>
cJSON *config_parse_json_file(const char *path);
int config_walk_file(Config *c, const cJSON *root, const JKey *keys, const char *file);
// "key \"key\" must be want (got ...)": noted as a problem of the walk under way, else printed
// as one line naming the file. -1.
int config_type_error(const char *file, const char *key, const char *want, const cJSON *j);

// The model rules and seq_len of a checkpoint's config.json, each line naming the file (validate.c).
int config_validate_checkpoint_model(const Config *c, const char *path);
