// json.c — reading a JSON config: parsed strictly (malformed JSON and a top level that is not an
// object are errors at once), each member walked against a key table (json_keys.c) and stored into
// Config; every problem of the file (a key twice in one object, a value of the wrong type or
// range, an unknown key with a "did you mean" where a name is near, a DeepSpeed key ted cannot
// honour, steps_per_print and log_every at odds) gathered into one line.
#include "config/tables.h"
#include "core/alloc.h"
#include "core/util.h"
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

static void key_problem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int walking;   // a walk is under way: its problems are gathered (key_problem)

int config_type_error(const char *file, const char *key, const char *want, const cJSON *j) {
    char got[96];
    describe(j, got, sizeof got);
    if (walking) key_problem("key \"%s\" must be %s (got %s)", key, want, got);
    else ted_error("%s: key \"%s\" must be %s (got %s)", file, key, want, got);
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
    return config_type_error(file, key, want, j);
}

static int json_float(const cJSON *j, float *out) {
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || fabs(j->valuedouble) > FLT_MAX) return -1;
    *out = (float)j->valuedouble;
    return 0;
}

static void walk(Config *c, const cJSON *obj, const JKey *keys, const char *prefix, const char *file);
static void sparse_problem(const char *section, const char *name, const char *want);

// The problems of the file being read, gathered into one line.
static struct {
    char text[1536];
    int n;
} key_problems;

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

static int cmp_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

// Each key that appears more than once among obj's members, noted once (cJSON keeps every copy).
static void note_duplicates(const cJSON *obj, const char *prefix) {
    int n = 0;
    for (const cJSON *e = obj->child; e; e = e->next) n++;
    if (!cJSON_IsObject(obj) || n < 2) return;
    const cJSON **v = ted_alloc(sizeof *v * (size_t)n, MEM_TEMP);
    n = 0;
    for (const cJSON *e = obj->child; e; e = e->next) v[n++] = e;
    qsort(v, (size_t)n, sizeof *v, cmp_key);
    for (int i = 1; i < n; i++)
        if (!strcmp(v[i - 1]->string, v[i]->string) && (i < 2 || strcmp(v[i - 2]->string, v[i]->string)))
            key_problem("key \"%s%s%.100s\" appears twice in one object", prefix, *prefix ? "." : "", v[i]->string);
    ted_free(v);
}

static const char *off_only_why(const char *key) {
    const char *why = config_not_honoured(key);
    return why ? why : "not a feature of ted";
}

// Stores one value of a known key.
// "pipeline.layers": block counts per stage, or "auto".
static int apply_pp_layers(Config *c, const cJSON *j, const char *key, const char *file) {
    int n = cJSON_GetArraySize(j), rc;
    double d;
    if (cJSON_IsString(j) && !strcmp(j->valuestring, "auto")) {
        c->pp_auto = 1;
        c->pp_nlayers = 0;
        return 0;
    }
    if (!cJSON_IsArray(j) || n < 1 || n > (int)(sizeof c->pp_layers / sizeof c->pp_layers[0]))
        return config_type_error(file, key, "an array of 1 to 256 block counts, or \"auto\"", j);
    c->pp_auto = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = json_integer(cJSON_GetArrayItem(j, i), 1, INT_MAX, &d)) != 0)
            return integer_error(file, key, rc, "[1, 2^31-1] for every entry", cJSON_GetArrayItem(j, i));
        c->pp_layers[i] = (int)d;
    }
    c->pp_nlayers = n;
    return 0;
}

// The keys whose value is one of two words: the first, the second (in the order an error names
// them), the value the first stores (the other stores its negation), and whether case matters
// (DeepSpeed's type names are read case-blind).
static const struct {
    JKind kind;
    const char *first, *second;
    int first_value, nocase;
} two_words[] = {
    {J_ORDER, "sequential", "shuffled", 1, 0},
    {J_COMPRESSION, "sign", "none", 1, 0},
    {J_OFFLOAD_DEVICE, "cpu", "none", 1, 0},
    {J_WARMUP_TYPE, "log", "linear", 0, 0},
};

static int apply_two_words(Config *c, const cJSON *j, const JKey *k, const char *key, const char *file) {
    const char *v = cJSON_IsString(j) ? j->valuestring : NULL;
    for (size_t i = 0; i < sizeof two_words / sizeof two_words[0]; i++) {
        if (two_words[i].kind != k->kind) continue;
        int (*same)(const char *, const char *) = two_words[i].nocase ? strcasecmp : strcmp;
        int first = v && !same(v, two_words[i].first), second = v && !same(v, two_words[i].second);
        char want[64];
        snprintf(want, sizeof want, "\"%s\" or \"%s\"", two_words[i].first, two_words[i].second);
        if (!first && !second) return config_type_error(file, key, want, j);
        *FIELD(c, k->off, int) = first ? two_words[i].first_value : !two_words[i].first_value;
        return 0;
    }
    return -1;
}

// optimizer.type's names, by index: DeepSpeed's Adam is AdamW unless optimizer.params.adam_w_mode
// is false (validate.c).
static const char *const optimizer_names[] = {"AdamW", "OneBitAdam", "Adam"};

static void set_optimizer(Config *c, int i) {
    c->onebit = i == 1;
    c->adam_named = i == 2;
}

// The keys whose value is one of a list of names (its index is stored): the optimizer and the
// scheduler (read case-blind, as DeepSpeed does), the pipeline schedule, the router, the expert
// kind, the architecture.
static int apply_name(Config *c, const cJSON *j, const JKey *k, const char *key, const char *file) {
    static const char *const pp_names[] = {"gpipe", "1f1b", "interleaved"};
    const char *const *names = k->kind == J_SCHEDULER_TYPE   ? sched_names
                               : k->kind == J_OPTIMIZER_TYPE ? optimizer_names
                               : k->kind == J_PP_SCHEDULE    ? pp_names
                               : k->kind == J_ROUTER         ? router_names
                               : k->kind == J_EXPERT_TYPE    ? expert_type_names
                                                             : arch_names;
    int n = k->kind == J_SCHEDULER_TYPE   ? SCHED_KINDS
            : k->kind == J_OPTIMIZER_TYPE ? 3
            : k->kind == J_PP_SCHEDULE    ? 3
            : k->kind == J_ROUTER         ? ROUTER_KINDS
            : k->kind == J_EXPERT_TYPE    ? EXPERT_KINDS
                                          : ARCH_KINDS;
    int nocase = k->kind == J_SCHEDULER_TYPE || k->kind == J_OPTIMIZER_TYPE;
    const char *v = cJSON_IsString(j) ? j->valuestring : NULL;
    for (int i = 0; v && i < n; i++)
        if (nocase ? !strcasecmp(v, names[i]) : !strcmp(v, names[i])) {
            if (k->kind == J_OPTIMIZER_TYPE) set_optimizer(c, i);
            else *FIELD(c, k->off, int) = i;
            return 0;
        }
    char want[160];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(want + len, sizeof want - len, "%s\"%s\"",
                                i == 0       ? ""
                                : i == n - 1 ? " or "
                                             : ", ",
                                names[i]);
    return config_type_error(file, key, want, j);
}

// optimizer.params.betas: [beta1, beta2].
static int apply_betas(Config *c, const cJSON *j, const char *key, const char *file) {
    float b1, b2;
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 || json_float(cJSON_GetArrayItem(j, 0), &b1) != 0 ||
        json_float(cJSON_GetArrayItem(j, 1), &b2) != 0)
        return config_type_error(file, key, "an array of two numbers", j);
    c->beta1 = b1;
    c->beta2 = b2;
    return 0;
}

// A folder path (511 bytes at most), or a job name (127, no "/").
static int apply_text(Config *c, const cJSON *j, const JKey *k, const char *key, const char *file) {
    size_t max = k->kind == J_PATH ? 511 : 127;
    if (!cJSON_IsString(j) || strlen(j->valuestring) > max || (k->kind == J_NAME && strchr(j->valuestring, '/')))
        return config_type_error(
            file, key, k->kind == J_PATH ? "a path of at most 511 bytes" : "a name of at most 127 bytes without \"/\"",
            j);
    strcpy(FIELD(c, k->off, char), j->valuestring);
    return 0;
}

// A DeepSpeed key accepted with no effect: checked, and noted (for config_warn's line) when its
// value asks for something ted does not do.
static int apply_no_effect(const cJSON *j, const char *key, const char *file) {
    char does = 0;
    const char *why, *name;
    for (int i = 0; (name = config_no_effect_key(i, &does, &why)); i++)
        if (!strcmp(name, key)) break;
    double d;
    if (!name) return -1;
    if (does == 'n' && json_integer(j, 1, 9007199254740992.0, &d) != 0)
        return config_type_error(file, key, "an integer in [1, 2^53]", j);
    if (does != 'n' && !cJSON_IsBool(j)) return config_type_error(file, key, "true or false", j);
    if (does == 'n' || cJSON_IsTrue(j) != (does == 't')) config_mark_json(key);
    return 0;
}

static int apply_value(Config *c, const cJSON *j, const JKey *k, const char *key, const char *file) {
    double d;
    float f;
    int rc;
    switch (k->kind) {
    case J_INT:
        if ((rc = json_integer(j, INT_MIN, INT_MAX, &d)) != 0)
            return integer_error(file, key, rc, "[-2^31, 2^31-1]", j);
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
        if (json_float(j, &f) != 0) return config_type_error(file, key, "a number", j);
        *FIELD(c, k->off, float) = f;
        if (k->kind == J_MIN_LR) c->min_lr_set = 1;
        return 0;
    case J_BOOL:
        if (!cJSON_IsBool(j)) return config_type_error(file, key, "true or false", j);
        *FIELD(c, k->off, int) = cJSON_IsTrue(j);
        return 0;
    case J_SECTION:
        if (!cJSON_IsObject(j)) return config_type_error(file, key, "an object", j);
        walk(c, j, k->section, key, file);
        return 0;
    case J_ORDER:
    case J_COMPRESSION:
    case J_OFFLOAD_DEVICE:
    case J_WARMUP_TYPE: return apply_two_words(c, j, k, key, file);
    case J_OPTIMIZER_TYPE:
    case J_SCHEDULER_TYPE:
    case J_PP_SCHEDULE:
    case J_ROUTER:
    case J_EXPERT_TYPE:
    case J_ARCH: return apply_name(c, j, k, key, file);
    case J_PP_LAYERS: return apply_pp_layers(c, j, key, file);
    case J_BETAS: return apply_betas(c, j, key, file);
    case J_OFF_ONLY:   // a DeepSpeed feature ted does not have: false is what ted does
        if (!cJSON_IsBool(j)) return config_type_error(file, key, "true or false", j);
        if (cJSON_IsTrue(j)) key_problem("\"%s\" true (ted cannot honour it: %s)", key, off_only_why(key));
        return 0;
    case J_NO_EFFECT: return apply_no_effect(j, key, file);
    case J_ADAM_W_MODE:
        if (!cJSON_IsBool(j)) return config_type_error(file, key, "true or false", j);
        c->adam_w_mode = cJSON_IsTrue(j);
        return 0;
    case J_COMMENT: return cJSON_IsString(j) ? 0 : config_type_error(file, key, "a string", j);
    case J_PATH:
    case J_NAME: return apply_text(c, j, k, key, file);
    case J_SPARSE:
        note_duplicates(j, key);
        return sparse_config_json(FIELD(c, k->off, SparseConfig), j, key, sparse_problem);
    }
    return -1;
}

static const JKey *find_key(const JKey *keys, const char *name) {
    for (const JKey *k = keys; k->name; k++)
        if (strcmp(k->name, name) == 0) return k;
    return NULL;
}

// Levenshtein distance of two short names (longer ones count as far apart).
int config_edit_distance(const char *a, const char *b) {
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
int config_near_name(const char *typed, const char *name) {
    int d = config_edit_distance(typed, name), len = (int)strlen(typed);
    return d <= 1 || d <= len / 4;
}

static const JKey *walk_root;   // the key table of the file being read (for "did you mean" elsewhere)

// The full path of a key of this name in another section of the table (prefix + ...), or 0.
static int find_elsewhere(const JKey *keys, const char *name, const char *prefix, char *out, size_t n) {
    for (const JKey *k = keys; k->name; k++) {
        char path[160];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->name);
        if (!strcmp(k->name, name)) {
            snprintf(out, n, "%s", path);
            return 1;
        }
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
        int d = config_edit_distance(name, k->name);
        if (d < bd && config_near_name(name, k->name)) {
            bd = d;
            best = k;
        }
    }
    char path[160];
    out[0] = 0;
    if (best) snprintf(out, n, " (did you mean \"%s%s%s\"?)", prefix, *prefix ? "." : "", best->name);
    else if (walk_root && find_elsewhere(walk_root, name, "", path, sizeof path))
        snprintf(out, n, " (did you mean \"%s\"?)", path);
}

// A problem of the sparse_attention section (read by sparse_config.c): noted like the others.
static void sparse_problem(const char *section, const char *name, const char *want) {
    if (want) {
        key_problem("key \"%s%s%s\" must be %s", section, name ? "." : "", name ? name : "", want);
        return;
    }
    const char *best = NULL;
    int bd = 1000;
    for (const char *const *k = sparse_config_keys; *k; k++) {
        int d = config_edit_distance(name, *k);
        if (d < bd && config_near_name(name, *k)) {
            bd = d;
            best = *k;
        }
    }
    char hint[200], path[160];
    hint[0] = 0;
    if (best) snprintf(hint, sizeof hint, " (did you mean \"%s.%s\"?)", section, best);
    else if (walk_root && find_elsewhere(walk_root, name, "", path, sizeof path))
        snprintf(hint, sizeof hint, " (did you mean \"%s\"?)", path);
    key_problem("unknown key \"%s.%s\"%s", section, name, hint);
}

// Applies every member of obj. Every problem is noted (key_problem) and the walk goes on, so that
// one line reports them all.
static void walk(Config *c, const cJSON *obj, const JKey *keys, const char *prefix, const char *file) {
    note_duplicates(obj, prefix);
    for (const cJSON *j = obj->child; j; j = j->next) {
        char key[256], hint[200];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", j->string);
        const JKey *k = find_key(keys, j->string);
        if (!k) {
            const char *why = config_not_honoured(key);
            if (why) key_problem("\"%s\" (ted cannot honour it: %s)", key, why);
            else {
                did_you_mean(keys, j->string, prefix, hint, sizeof hint);
                key_problem("unknown key \"%s\"%s", key, hint);
            }
            continue;
        }
        if (k->kind != J_SECTION && k->kind != J_NO_EFFECT) config_mark_json(key);
        apply_value(c, j, k, key, file);   // a bad value is noted; nothing is stored
    }
}

// Two names of one setting (DeepSpeed's and ted's) given at the top level with different values.
static void note_aliases(const cJSON *root) {
    static const char *const alias[][2] = {{"steps_per_print", "log_every"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, alias[i][0]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, alias[i][1]);
        if (cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble != b->valuedouble)
            key_problem("\"%s\" %.10g and \"%s\" %.10g name one setting with two values (give one)", alias[i][0],
                        a->valuedouble, alias[i][1], b->valuedouble);
    }
}

// Walks a whole file from its root table; its problems, if any, in one line.
int config_walk_file(Config *c, const cJSON *root, const JKey *keys, const char *file) {
    key_problems.n = 0;
    key_problems.text[0] = 0;
    walk_root = keys;
    walking = 1;
    walk(c, root, keys, "", file);
    if (keys == config_top_keys) note_aliases(root);
    walking = 0;
    walk_root = NULL;
    if (key_problems.n == 1) ted_error("%s: %s", file, key_problems.text);
    else if (key_problems.n > 1) ted_error("%s: %d problems: %s", file, key_problems.n, key_problems.text);
    return key_problems.n ? -1 : 0;
}

// Reads and parses a JSON file whose top level is an object; NULL after one error line.
cJSON *config_parse_json_file(const char *path) {
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
        ted_error("%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line = 1, col = 1;
        for (const char *p = text; end && p < end && p < text + len; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else col++;
        }
        if (len == 0) ted_error("%s: malformed JSON: the file is empty", path);
        else ted_error("%s: malformed JSON near line %d, column %d", path, line, col);
    } else if (!cJSON_IsObject(root)) {
        ted_error("%s: the top level must be a JSON object", path);
        cJSON_Delete(root);
        root = NULL;
    }
    ted_free(text);
    return root;
}

int config_load_json(Config *c, const char *path) {
    cJSON *root = config_parse_json_file(path);
    if (!root) return -1;
    int rc = config_walk_file(c, root, config_top_keys, path);
    cJSON_Delete(root);
    return rc;
}
