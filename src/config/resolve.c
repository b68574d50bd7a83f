// resolve.c — a run's configuration in its fixed order (see config.h): defaults, the
// checkpoint's model, the JSON, the flags, the derived values, the rules; and where each
// setting's value came from.
#include "config/tables.h"
#include "core/alloc.h"
#include "core/util.h"
#include <stdio.h>
#include <string.h>

const char *config_flag_value(int argc, char **argv, const char *name) {
    const char *v = NULL;
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], name)) v = i + 1 < argc ? argv[i + 1] : "";
        else if (!strncmp(argv[i], name, n) && argv[i][n] == '=') v = argv[i] + n + 1;
    }
    return v;
}

void config_derive(Config *c) {
    config_follow_lr(c);
    if (c->seq_len == 0 && !config_given("seq_len")) c->seq_len = c->model.n_positions;   // a given 0 is refused
    if (c->cac) c->activation_checkpointing = 1;   // communication-aware checkpointing is checkpointing
    // DeepSpeed's schedulers warm up over 1000 steps unless told (ted's WarmupCosine: 100)
    if (c->sched.type != SCHED_WARMUP_COSINE && !config_given("scheduler.params.warmup_num_steps")) c->warmup = 1000;
}

// The settings of c as the model keys are compared: n_inner 0 read as what it means (4d),
// expert_inner 0 as n_inner, n_kv_head 0 as n_head, seq_len 0 as n_positions.
static ConfigSettings *settings_of(const Config *c) {
    ConfigSettings *S = ted_alloc(sizeof *S, MEM_TEMP);
    Config k = *c;
    k.model.n_inner = cfg_ffn(&c->model);
    k.model.expert_inner = cfg_expert_inner(&c->model);
    k.model.n_kv_head = cfg_kv_heads(&c->model);
    k.seq_len = cfg_seq_len(&k);
    config_settings(&k, S);
    return S;
}

static int is_model_or_seq(const ConfigSetting *s) { return config_is_model_key(s) || !strcmp(s->name, "seq-len"); }
static char given_by(const ConfigSetting *s) {
    return config_flag_given(s->name) ? 'f' : s->json[0] && config_json_given(s->json) ? 'j' : 0;
}

// The model keys the JSON or a flag gave that differ from the checkpoint's: one line naming
// every such key, -1; else 0.
static int check_given_model(const ConfigSettings *S, const ConfigSettings *K, const ConfigCheckpoint *ck) {
    char msg[2048] = "";
    size_t n = 0;
    for (int i = 0; i < S->n && i < K->n && n < sizeof msg - 100; i++) {
        const ConfigSetting *s = &S->s[i];
        char by = given_by(s);
        if (!config_is_model_key(s) || !by || !strcmp(s->value, K->s[i].value)) continue;
        const char *key = strrchr(s->json, '.') + 1;   // model keys are named as in config.json
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s %s (%s) vs %s", n ? ", " : "", key, s->value,
                              by == 'f' ? "flag" : "--config", K->s[i].value);
    }
    if (!n) return 0;
    ted_error("%s %s: the given model differs from the checkpoint's: %s (leave the model keys out: %s takes them "
              "from the checkpoint)",
              ck->opt, ck->dir, msg, ck->opt);
    return -1;
}

// Where each setting came from: a flag, the JSON, else the checkpoint where its model key (or
// seq_len) differs from the default's, else the default.
static void note_origins(const ConfigSettings *S, const ConfigSettings *K, const ConfigSettings *D) {
    for (int i = 0; i < S->n; i++) {
        const ConfigSetting *s = &S->s[i];
        char by = given_by(s);
        int from_ck = K && i < K->n && is_model_or_seq(s) && strcmp(K->s[i].value, D->s[i].value);
        config_set_origin(i, by ? by : from_ck ? 'c' : 'd');
    }
}

// After the JSON and the flags: a given model key must be the checkpoint's; the model is then
// the checkpoint's exactly (and seq_len, unless given); the origins noted.
static int settle(Config *c, const Config *base, const ConfigCheckpoint *ck) {
    ConfigSettings *S = settings_of(c), *D = settings_of(base), *K = NULL;
    if (ck) {   // this run's settings with the checkpoint's model and seq_len
        Config *k = ted_alloc(sizeof *k, MEM_TEMP);
        *k = *c;
        k->model = ck->cfg.model;
        k->seq_len = ck->cfg.seq_len;
        K = settings_of(k);
        ted_free(k);
    }
    int rc = ck ? check_given_model(S, K, ck) : 0;
    if (!rc && ck) c->model = ck->cfg.model;
    if (!rc) note_origins(S, K, D);
    ted_free(S);
    ted_free(D);
    if (K) ted_free(K);
    return rc;
}

// The rules (config_check); a broken one in one line, naming the --config file when the rule's key
// (the first word of its text) was read from it.
static int validate_from(const Config *c, const char *path) {
    char why[512], key[128];
    if (config_check(c, why, sizeof why) == 0) return 0;
    snprintf(key, sizeof key, "%.*s", (int)strcspn(why, " (:"), why);
    if (path && config_json_given(key)) ted_error("%s: invalid config: %s", path, why);
    else ted_error("invalid config: %s", why);
    return -1;
}

int config_resolve(Config *c, int argc, char **argv, void (*defaults)(Config *), const ConfigCheckpoint *ck) {
    defaults(c);
    config_origins_clear();
    Config *base = ted_alloc(sizeof *base, MEM_TEMP);
    *base = *c;
    if (ck) {   // the checkpoint's model, under the JSON and the flags
        c->model = ck->cfg.model;
        c->seq_len = ck->cfg.seq_len;
    }
    const char *path = config_flag_value(argc, argv, "--config");
    int rc = 0;
    if (path && !path[0]) {
        ted_error("--config: needs a file");
        rc = -1;
    }
    if (!rc && path) rc = config_load_json(c, path);
    if (!rc) rc = config_apply_flags(c, argc, argv, 1);
    if (!rc) rc = settle(c, base, ck);
    ted_free(base);
    if (rc) return -1;
    config_derive(c);
    return validate_from(c, path);
}
