// settings.c — every setting of a run as text (the run record prints it, the ranks agree on it),
// which keys the JSON and the flags gave, and where each setting's value came from.
#include "config/tables.h"
#include "core/alloc.h"
#include <stdlib.h>
#include <string.h>

// The JSON keys given (full paths) and the flags given, since config_defaults.
#define MAX_GIVEN 256
static char json_keys[MAX_GIVEN][256];
static const Flag *flags_given[MAX_GIVEN];
static int n_json, n_flags;
static char origins[CONFIG_MAX_SETTINGS];   // by setting index: 'd', 'j', 'f', 'c'

void config_given_clear(void) { n_json = n_flags = 0; }

void config_mark_json(const char *path) {
    if (config_json_given(path)) return;
    if (n_json < MAX_GIVEN) snprintf(json_keys[n_json++], sizeof json_keys[0], "%s", path);
}

void config_mark_flag(const Flag *f) {
    for (int i = 0; i < n_flags; i++)
        if (flags_given[i] == f) return;
    if (n_flags < MAX_GIVEN) flags_given[n_flags++] = f;
}

int config_json_given(const char *path) {
    for (int i = 0; i < n_json; i++)
        if (!strcmp(json_keys[i], path)) return 1;
    return 0;
}

int config_flag_given(const char *name) {
    for (int i = 0; i < n_flags; i++)
        if (!strcmp(flags_given[i]->flag + 2, name)) return 1;
    return 0;
}

// The flags that override a JSON key, after the JSON's own keys, each key once.
static const char *flag_key(int i) {
    const char *k = flags_given[i]->json;
    if (!k || config_json_given(k)) return NULL;
    for (int j = 0; j < i; j++)
        if (flags_given[j]->json && !strcmp(flags_given[j]->json, k)) return NULL;
    return k;
}

int config_given_count(void) { return n_json + n_flags; }

const char *config_given_key(int i) { return i < n_json ? json_keys[i] : flag_key(i - n_json); }

int config_given(const char *path) {
    if (config_json_given(path)) return 1;
    for (int i = 0; i < n_flags; i++)
        if (flags_given[i]->json && !strcmp(flags_given[i]->json, path)) return 1;
    return 0;
}

void config_origins_clear(void) { memset(origins, 'd', sizeof origins); }

void config_set_origin(int i, char from) {
    if (i >= 0 && i < CONFIG_MAX_SETTINGS) origins[i] = from;
}

char config_origin(int i) { return i >= 0 && i < CONFIG_MAX_SETTINGS && origins[i] ? origins[i] : 'd'; }

// The shortest decimal form that reads back as the same float.
void config_format_float(char *buf, size_t n, float v) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

static char format_value(const Flag *f, const Config *c, char *buf, size_t n) {
    switch (f->kind) {
    case F_INT: snprintf(buf, n, "%d", *FIELD(c, f->off, int)); return 'n';
    case F_LONG: snprintf(buf, n, "%ld", *FIELD(c, f->off, long)); return 'n';
    case F_FLOAT:
    case F_MIN_LR: config_format_float(buf, n, *FIELD(c, f->off, float)); return 'n';
    case F_SEED: snprintf(buf, n, "%llu", (unsigned long long)*FIELD(c, f->off, uint64_t)); return 'n';
    case F_SWITCH: snprintf(buf, n, "%s", *FIELD(c, f->off, int) ? "true" : "false"); return 'b';
    case F_ORDER: snprintf(buf, n, "%s", *FIELD(c, f->off, int) ? "sequential" : "shuffled"); return 's';
    case F_DEVICE: snprintf(buf, n, "%s", *FIELD(c, f->off, int) == DEV_CUDA ? "cuda" : "cpu"); return 's';
    case F_PP_SCHEDULE: snprintf(buf, n, "%s", config_pp_schedule_name(*FIELD(c, f->off, int))); return 's';
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
    for (int i = 0; i < config_nflags; i++)
        if (config_flags[i].json && !strcmp(config_flags[i].json, path)) return 1;
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
    case J_FLOAT:
    case J_MIN_LR: config_format_float(buf, n, *FIELD(c, k->off, float)); return 'n';
    case J_BOOL: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "true" : "false"); return 'b';
    case J_ORDER: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "sequential" : "shuffled"); return 's';
    case J_OPTIMIZER_TYPE: snprintf(buf, n, "%s", c->onebit ? "OneBitAdam" : c->adam_named ? "Adam" : "AdamW"); return 's';
    case J_SCHEDULER_TYPE: snprintf(buf, n, "%s", sched_names[c->sched.type]); return 's';
    case J_WARMUP_TYPE: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "linear" : "log"); return 's';
    case J_PATH:
    case J_NAME: snprintf(buf, n, "%s", FIELD(c, k->off, char)); return 's';
    case J_COMPRESSION: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "sign" : "none"); return 's';
    case J_OFFLOAD_DEVICE: snprintf(buf, n, "%s", *FIELD(c, k->off, int) ? "cpu" : "none"); return 's';
    case J_PP_SCHEDULE: snprintf(buf, n, "%s", config_pp_schedule_name(*FIELD(c, k->off, int))); return 's';
    case J_PP_LAYERS: put_ints(buf, n, c->pp_layers, c->pp_nlayers); return 'r';
    case J_ROUTER: snprintf(buf, n, "%s", router_names[*FIELD(c, k->off, int)]); return 's';
    case J_EXPERT_TYPE: snprintf(buf, n, "%s", expert_type_names[*FIELD(c, k->off, int)]); return 's';
    case J_ARCH: snprintf(buf, n, "%s", arch_names[*FIELD(c, k->off, int)]); return 's';
    case J_BETAS:
        config_format_float(b1, sizeof b1, c->beta1);
        config_format_float(b2, sizeof b2, c->beta2);
        snprintf(buf, n, "[%s, %s]", b1, b2);
        return 'r';
    case J_SPARSE:
        sparse_config_write(FIELD(c, k->off, SparseConfig), c->seed, buf, (int)n);
        if (!buf[0]) snprintf(buf, n, "{\"mode\": \"dense\"}");
        return 'r';
    case J_SECTION:
    case J_OFF_ONLY:
    case J_NO_EFFECT:     // DeepSpeed keys that set nothing
    case J_ADAM_W_MODE:   // accepted only where it changes nothing (validate.c)
    case J_COMMENT: break;
    }   // every kind is listed: a new one is a -Wswitch warning here
    return 0;
}

// Every JSON key that no flag sets, named by its dotted path: whatever the walker can set, the run
// record prints (and the ranks agree on) without a list of its own.
static void each_json_key(const Config *c, const JKey *keys, const char *prefix, SettingFn fn, void *ctx, char *v,
                          size_t n) {
    for (const JKey *k = keys; k->name; k++) {
        char path[160];
        if (snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->name) >= (int)sizeof path) continue;
        if (k->kind == J_SECTION) {
            each_json_key(c, k->section, path, fn, ctx, v, n);
            continue;
        }
        char type = flag_has_json(path) ? 0 : json_key_value(c, k, v, n);
        if (type) fn(ctx, path, path, v, type);
    }
}

static void collect(void *ctx, const char *name, const char *json, const char *value, char type) {
    ConfigSettings *S = ctx;
    if (S->n >= CONFIG_MAX_SETTINGS) return;
    ConfigSetting *s = &S->s[S->n++];
    snprintf(s->name, sizeof s->name, "%.63s", name);
    snprintf(s->json, sizeof s->json, "%.63s", json ? json : "");
    snprintf(s->value, sizeof s->value, "%.1099s", value);
    s->type = type;
}

void config_settings(const Config *c, ConfigSettings *S) {
    S->n = 0;
    config_each_setting(c, collect, S);
}

int config_is_model_key(const ConfigSetting *s) {
    return !strncmp(s->json, "model.", 6) || !strncmp(s->json, "moe.", 4);
}

void config_each_setting(const Config *c, SettingFn fn, void *ctx) {
    enum { V = 8192 };
    char *v = ted_alloc(V, MEM_TEMP);
    for (int i = 0; i < config_nflags; i++) {
        if (config_flags[i].kind == F_CONFIG) continue;
        char type = format_value(&config_flags[i], c, v, V);
        fn(ctx, config_flags[i].flag + 2, config_flags[i].json, v, type);
    }
    each_json_key(c, config_top_keys, "", fn, ctx, v, V);
    ted_free(v);
}
