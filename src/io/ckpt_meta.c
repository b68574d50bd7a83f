// ckpt_meta.c — a checkpoint folder as its small files describe it (see ckpt_meta.h).
#include "io/ckpt_meta.h"
#include "io/hf_import.h"
#include "core/alloc.h"
#include "core/json.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

int ckpt_resolve(const char *path, char *dir, size_t len) {
    char p[1300];
    struct stat sb;
    if (stat(path, &sb) || !S_ISDIR(sb.st_mode)) { ted_error("%s: no such checkpoint directory", path); return -1; }
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    if (!stat(p, &sb)) { snprintf(dir, len, "%s", path); return 0; }
    DIR *d = opendir(path);
    long best = -1;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1 && s > best) best = s;
    }
    if (d) closedir(d);
    if (best < 0) { ted_error("%s: holds no checkpoint (no model.safetensors, no step_* directory)", path); return -1; }
    snprintf(dir, len, "%s/step_%08ld", path, best);
    return 0;
}

int ckpt_read_config(const char *dir, Config *cfg) {
    char p[1300];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return hf_import_is_foreign(p) ? hf_import_config(p, cfg) : config_load_model_json(cfg, p);
}

static int same_shape(const char *dir, const Config *a, const ModelConfig *b) {
    const ModelConfig *m = &a->model;
#define SAME(k) if (m->k != b->k) { ted_error("%s: checkpoint is of another model shape (" #k " %g, this run %g)", \
                                              dir, (double)m->k, (double)b->k); return 0; }
    SAME(vocab_size) SAME(n_positions) SAME(n_embd) SAME(n_layer) SAME(n_head) SAME(num_experts) SAME(moe_every)
    SAME(expert_type) SAME(shared_experts)
#undef SAME
    if (m->num_experts > 1 && cfg_expert_inner(m) != cfg_expert_inner(b)) {
        ted_error("%s: checkpoint is of another model shape (expert_inner %d, this run %d)", dir, cfg_expert_inner(m),
                  cfg_expert_inner(b));
        return 0;
    }
    if (cfg_ffn(m) != cfg_ffn(b)) {
        ted_error("%s: checkpoint is of another model shape (n_inner %d, this run %d)", dir, cfg_ffn(m), cfg_ffn(b));
        return 0;
    }
    return 1;
}

int ckpt_check_model(const char *dir, const Config *ck, const ModelConfig *run) { return same_shape(dir, ck, run) ? 0 : -1; }

// An integer member of the trainer state in [lo, hi]; 0, or -1 after one line.
static int state_int(const char *path, const cJSON *j, const char *key, long lo, long hi, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d)) {
        ted_error("%s: \"%s\" must be an integer in [%ld, %ld]", path, key, lo, hi);
        return -1;
    }
    *out = (long)d;
    return 0;
}

// trainer_state.json: every number range-checked (a step no run of ted can reach, an Adam
// count past the step, a seed that is not a 64-bit integer are refused, naming the key).
// "onebit_layout": [world, tp, ep], present when 1-bit Adam's errors were saved. 0 or -1.
static int onebit_layout(const char *path, const cJSON *j, int out[3]) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "onebit_layout");
    memset(out, 0, 3 * sizeof(int));
    if (!a) return 0;
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3 || !cJSON_IsNumber(x) || x->valuedouble < 1 ||
            x->valuedouble > 1 << 20 || x->valuedouble != (int)x->valuedouble) {
            ted_error("%s: \"onebit_layout\" must be [world, tp, ep], three integers >= 1", path);
            return -1;
        }
        out[i] = (int)x->valuedouble;
    }
    return 0;
}

// "run_id": 16 hex digits, optional (checkpoints from before run ids lack it). 0 or -1.
static int state_run_id(const char *path, const cJSON *j, char out[17]) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    out[0] = 0;
    if (!v) return 0;
    int ok = cJSON_IsString(v) && strlen(v->valuestring) == 16;
    for (int i = 0; ok && i < 16; i++) ok = isxdigit((unsigned char)v->valuestring[i]);
    if (!ok) { ted_error("%s: \"run_id\" must be a string of 16 hex digits", path); return -1; }
    snprintf(out, 17, "%s", v->valuestring);
    return 0;
}

int read_trainer_state(const char *path, TrainerState *st) {
    cJSON *j = json_read_object(path);   // a key twice is refused, not read as its first
    if (!j) return -1;
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(j, "seed"), *o = cJSON_GetObjectItemCaseSensitive(j, "data_order");
    int rc = state_int(path, j, "steps", 0, INT_MAX, &st->steps) || state_int(path, j, "step", 0, st->steps, &st->step) ||
             state_int(path, j, "adam_t", 0, st->step, &st->adam_t);
    char *end = NULL;
    errno = 0;
    if (!rc && (!cJSON_IsString(sd) || !isdigit((unsigned char)sd->valuestring[0]) ||
                (st->seed = strtoull(sd->valuestring, &end, 10), errno || *end))) {   // a string: 64-bit seeds survive JSON
        ted_error("%s: \"seed\" must be a string holding an integer in [0, 2^64-1]", path);
        rc = -1;
    }
    if (!rc && (!cJSON_IsString(o) || (strcmp(o->valuestring, "sequential") && strcmp(o->valuestring, "shuffled")))) {
        ted_error("%s: \"data_order\" must be \"sequential\" or \"shuffled\"", path);
        rc = -1;
    }
    if (!rc) st->sequential = !strcmp(o->valuestring, "sequential");
    if (!rc) rc = onebit_layout(path, j, st->onebit_layout);
    if (!rc) rc = state_run_id(path, j, st->run_id);
    st->tokens = st->gbatch = -1;   // optional: older checkpoints lack them
    long tokens = 0;
    if (!rc && cJSON_GetObjectItemCaseSensitive(j, "tokens")) {
        rc = state_int(path, j, "tokens", 0, 9007199254740992L, &tokens);
        st->tokens = (double)tokens;
    }
    if (!rc && cJSON_GetObjectItemCaseSensitive(j, "global_batch")) rc = state_int(path, j, "global_batch", 1, LONG_MAX / 2, &st->gbatch);
    cJSON_Delete(j);
    return rc ? -1 : 0;
}
