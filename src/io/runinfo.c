// runinfo.c — the resolved settings of a run and where each came from (see runinfo.h).
#include "io/runinfo.h"
#include "core/alloc.h"
#include "io/ckpt_meta.h"
#include "parallel/comm.h"
#include "io/progress.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_SETTINGS = 192, MAX_VALUE = 1100 };
typedef struct { char name[64]; char json[64]; char value[MAX_VALUE]; char type, from; } Setting;
typedef struct { Setting s[MAX_SETTINGS]; int n; } Settings;

static char sources[MAX_SETTINGS];   // 'd' default, 'j' JSON, 'f' flag, 'c' checkpoint; by setting index
static cJSON *record;                // the run record (training runs only)

static void collect(void *ctx, const char *name, const char *json, const char *value, char type) {
    Settings *S = ctx;
    if (S->n >= MAX_SETTINGS) return;
    Setting *s = &S->s[S->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->json, sizeof s->json, "%s", json ? json : "");
    snprintf(s->value, sizeof s->value, "%s", value);
    s->type = type;
}

static void settings_of(const Config *c, Settings *S) {
    S->n = 0;
    config_each_setting(c, collect, S);
}

static const char *from_name(char f) {
    return f == 'f' ? "flag" : f == 'j' ? "json" : f == 'c' ? "checkpoint" : "default";
}

static int flag_given(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, name, n) && (!argv[i][n + 2] || argv[i][n + 2] == '='))
            return 1;
    return 0;
}

static const char *config_path(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) return i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(argv[i], "--config=", 9)) return argv[i] + 9;
    }
    return NULL;
}

// Whether the dotted key ("optimizer.params.lr") is present in the JSON object.
static int json_has(const cJSON *root, const char *dotted) {
    char key[64];
    const cJSON *o = root;
    for (const char *p = dotted; o && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        o = cJSON_GetObjectItemCaseSensitive(o, key);
        p += n + (dot != NULL);
    }
    return o != NULL && o != root;
}

static void note_sources(const Settings *S, int argc, char **argv) {
    const char *path = config_path(argc, argv);
    cJSON *root = NULL;
    if (path) {
        size_t len;
        char *text = read_file(path, &len);
        if (text) { root = cJSON_Parse(text); ted_free(text); }
    }
    for (int i = 0; i < S->n; i++) {
        const Setting *s = &S->s[i];
        sources[i] = flag_given(argc, argv, s->name) ? 'f' : root && s->json[0] && json_has(root, s->json) ? 'j' : 'd';
    }
    cJSON_Delete(root);
}

static int is_model_key(const Setting *s) { return !strncmp(s->json, "model.", 6) || !strncmp(s->json, "moe.", 4); }

static int same_value(const Setting *s, const cJSON *j) {
    if (!j) return 0;
    if (s->type == 'n') return cJSON_IsNumber(j) && strtod(s->value, NULL) == j->valuedouble;
    if (s->type == 'b') return cJSON_IsBool(j) && cJSON_IsTrue(j) == !strcmp(s->value, "true");
    if (s->type == 's') return cJSON_IsString(j) && !strcmp(s->value, j->valuestring);
    cJSON *a = cJSON_Parse(s->value);
    int same = a && cJSON_Compare(a, j, 1);
    cJSON_Delete(a);
    return same;
}

// Keys whose change on resume is part of normal use (where to write, how often to report,
// the layout, the length of the run — which has its own note).
static int quiet_on_resume(const char *name) {
    static const char *quiet[] = {"log", "save", "resume", "save-every", "log-every", "sample-every", "eval-every",
                                  "eval-windows", "threads", "steps", "peak-tflops", "device", "tp", "ep", "overwrite",
                                  "keep-last", "watchdog", "wall_clock_breakdown", NULL};
    for (int i = 0; quiet[i]; i++) if (!strcmp(name, quiet[i])) return 1;
    return 0;
}

// Rank 0: one warning naming every training key that differs from the checkpoint's run.json.
static void warn_training_changes(const Settings *S, const char *dir) {
    char path[1300];
    snprintf(path, sizeof path, "%s/run.json", dir);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return;   // a checkpoint written before run.json existed
    cJSON *root = cJSON_Parse(text);
    ted_free(text);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "run"), "config");
    char msg[2048] = "";
    size_t n = 0;
    for (int i = 0; cfg && i < S->n && n < sizeof msg - 200; i++) {
        const Setting *s = &S->s[i];
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(cfg, s->name);
        if (is_model_key(s) || quiet_on_resume(s->name) || !j || same_value(s, j)) continue;
        if (!strcmp(s->name, "min-lr") && sources[i] == 'd') continue;   // lr/10 follows lr
        char *old = cJSON_PrintUnformatted(j);
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s %s -> %s", n ? ", " : "", s->name, old, s->value);
        cJSON_free(old);
    }
    if (n) printf("warning: resuming with training keys that differ from the checkpoint's run: %s\n", msg);
    cJSON_Delete(root);
}

// --resume and --init-from (opt): the model from the checkpoint; a given model key that differs is refused.
static int adopt_checkpoint(Config *c, Settings *S, const char *dir, const char *opt) {
    Config ck = *c;
    if (ckpt_read_config(dir, &ck)) return -1;
    c->model.n_inner = cfg_ffn(&c->model);   // 0 means 4d: compare what it means
    Settings K;
    settings_of(&ck, &K);
    settings_of(c, S);
    char msg[2048] = "";
    size_t n = 0;
    for (int i = 0; i < S->n && i < K.n; i++) {
        const Setting *s = &S->s[i];
        int model = is_model_key(s), seq = !strcmp(s->name, "seq-len");
        if ((!model && !seq) || !strcmp(s->value, K.s[i].value)) continue;
        if (sources[i] == 'd') { sources[i] = 'c'; continue; }
        if (seq) continue;   // a given seq_len is a training choice (checked against n_positions)
        const char *key = strrchr(s->json, '.') + 1;   // model keys are named as in config.json
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s %s (%s) vs %s", n ? ", " : "", key, s->value,
                              sources[i] == 'f' ? "flag" : "--config", K.s[i].value);
        if (n > sizeof msg - 100) break;
    }
    if (n) {
        ted_error("%s %s: the given model differs from the checkpoint's: %s (leave the model keys out: "
                  "%s takes them from the checkpoint)", opt, dir, msg, opt);
        return -1;
    }
    int given_seq = 0;
    for (int i = 0; i < S->n; i++) if (!strcmp(S->s[i].name, "seq-len")) given_seq = sources[i] != 'd' && sources[i] != 'c';
    c->model = ck.model;
    if (!given_seq) c->seq_len = ck.seq_len;
    return 0;
}

// --resume without --save keeps saving into the run's folder: the --resume path when it is the
// folder of step_* checkpoints, the folder holding it when it is one step_N checkpoint. A lone
// checkpoint folder of another name has no run folder: nothing is saved, and a line says so.
static void save_where_resumed(Config *c, const char *ckdir) {
    if (c->save[0]) return;
    char dir[sizeof c->save];
    snprintf(dir, sizeof dir, "%s", c->resume);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    long step;
    char tail;
    int rank0 = comm_world_rank() == 0;
    if (strcmp(ckdir, c->resume) != 0) snprintf(c->save, sizeof c->save, "%s", dir);   // the run's folder itself
    else if (sscanf(base, "step_%ld%c", &step, &tail) == 1) {
        if (!slash) snprintf(c->save, sizeof c->save, ".");
        else if (slash == dir) snprintf(c->save, sizeof c->save, "/");
        else { *slash = 0; snprintf(c->save, sizeof c->save, "%s", dir); }
    } else {
        if (rank0) printf("resume: %s is a lone checkpoint, not a run's step_N: nothing is saved unless --save DIR\n", dir);
        return;
    }
    if (rank0) printf("resume: saving into %s, the folder resumed from (--save DIR saves elsewhere)\n", c->save);
}

int runinfo_resolve(Config *c, int argc, char **argv, char *ckdir, size_t cklen) {
    Settings *S = ted_alloc(sizeof *S, MEM_TEMP);
    settings_of(c, S);
    note_sources(S, argc, argv);
    int rc = 0;
    if (c->resume[0] && c->init_from[0]) {
        ted_error("--init-from and --resume exclude each other (--resume continues a run with its optimizer state, "
                  "--init-from starts a new run from the weights)");
        rc = -1;
    } else if (c->resume[0]) {
        rc = ckpt_resolve(c->resume, ckdir, cklen) || adopt_checkpoint(c, S, ckdir, "--resume");
        if (!rc) save_where_resumed(c, ckdir);
        if (!rc && comm_world_rank() == 0) {
            settings_of(c, S);
            warn_training_changes(S, ckdir);
        }
    } else if (c->init_from[0]) {   // the folder resolved in place (a run's folder: its newest step)
        char dir[sizeof c->init_from];
        rc = ckpt_resolve(c->init_from, dir, sizeof dir) || adopt_checkpoint(c, S, dir, "--init-from");
        if (!rc) snprintf(c->init_from, sizeof c->init_from, "%s", dir);
    }
    ted_free(S);
    return rc ? -1 : 0;
}

int runinfo_check_batch(const Config *c, int dp) {
    long have = (long)c->micro_batch * c->grad_accum * dp;
    if (c->train_batch_size <= 0 || have == c->train_batch_size) return 0;
    ted_error("train_batch_size %d does not equal micro_batch %d x gradient_accumulation_steps %d x dp %d = %ld",
              c->train_batch_size, c->micro_batch, c->grad_accum, dp, have);
    return -1;
}

static cJSON *value_json(const Setting *s) {
    if (s->type == 'n' || s->type == 'r') return cJSON_CreateRaw(s->value);
    if (s->type == 'b') return cJSON_CreateBool(!strcmp(s->value, "true"));
    return cJSON_CreateString(s->value);
}

// The settings of one source, wrapped at about 100 columns.
static void print_group(const Settings *S, char from, const char *title) {
    int col = 0, any = 0;
    for (int i = 0; i < S->n; i++) {
        const Setting *s = &S->s[i];
        if (sources[i] != from) continue;
        int w = (int)(strlen(s->name) + strlen(s->value) + 2);
        if (!any || col + w > 100) { printf("%s  %-11s", any ? "\n" : "", any ? "" : title); col = 13; }
        printf(" %s %s%s", s->name, s->type == 's' && !s->value[0] ? "\"\"" : s->value, "");
        col += w;
        any = 1;
    }
    if (any) printf("\n");
}

static void print_data(const Config *c, const Dataset *ds, int T, long gbatch) {
    char tr[32], va[32], tok[32], run[32];
    progress_count((double)ds->train.n, tr, sizeof tr);
    progress_count((double)ds->val.n, va, sizeof va);
    progress_count((double)gbatch * T, tok, sizeof tok);
    progress_count((double)gbatch * T * c->steps, run, sizeof run);
    long nw = data_nwindows(&ds->train, T);
    printf("data: %s: train %s tokens (%ld windows of %d), val %s tokens (%ld windows); %ld sequences = %s tokens "
           "per step; %d steps = %s tokens (%.2f epochs)\n", c->data, tr, nw, T, va, data_nwindows(&ds->val, T), gbatch,
           tok, c->steps, run, nw > 0 ? (double)gbatch * c->steps / nw : 0.0);
}

void runinfo_start(const Config *c, int argc, char **argv, const Dataset *ds, int T, int world, int dp, int rank0) {
    Settings *S = ted_alloc(sizeof *S, MEM_TEMP);
    settings_of(c, S);
    long gbatch = (long)c->micro_batch * c->grad_accum * dp;
    cJSON_Delete(record);
    record = cJSON_CreateObject();
    cJSON *run = cJSON_AddObjectToObject(record, "run");
    cJSON *av = cJSON_AddArrayToObject(run, "argv");
    for (int i = 0; i < argc; i++) cJSON_AddItemToArray(av, cJSON_CreateString(argv[i]));
    cJSON *cfg = cJSON_AddObjectToObject(run, "config"), *from = cJSON_AddObjectToObject(run, "from");
    for (int i = 0; i < S->n; i++) {
        cJSON_AddItemToObject(cfg, S->s[i].name, value_json(&S->s[i]));
        cJSON_AddStringToObject(from, S->s[i].name, from_name(sources[i]));
    }
    cJSON *d = cJSON_AddObjectToObject(run, "data");
    cJSON_AddStringToObject(d, "path", c->data);
    cJSON_AddNumberToObject(d, "train_tokens", (double)ds->train.n);
    cJSON_AddNumberToObject(d, "val_tokens", (double)ds->val.n);
    cJSON *l = cJSON_AddObjectToObject(run, "layout");
    cJSON_AddNumberToObject(l, "world", world);
    cJSON_AddNumberToObject(l, "tp", c->tp);
    cJSON_AddNumberToObject(l, "ep", c->ep);
    cJSON_AddNumberToObject(l, "dp", dp);
    cJSON_AddNumberToObject(run, "global_batch", (double)gbatch);
    cJSON_AddNumberToObject(run, "tokens_per_step", (double)gbatch * T);
    if (rank0) {
        const char *path = config_path(argc, argv);
        printf("config (every key; --help describes them)%s%s:\n", path ? ", JSON " : "", path ? path : "");
        print_group(S, 'f', "flags:");
        print_group(S, 'j', "json:");
        print_group(S, 'c', "checkpoint:");
        print_group(S, 'd', "defaults:");
        print_data(c, ds, T, gbatch);
    }
    ted_free(S);
}

void runinfo_log(FILE *f) {
    if (!f || !record) return;
    char *text = cJSON_PrintUnformatted(record);
    fprintf(f, "%s\n", text);
    write_check(f, NULL);
    cJSON_free(text);
}

int runinfo_write(const char *dir) {
    if (!record) return 0;
    char path[1300];
    snprintf(path, sizeof path, "%s/run.json", dir);
    char *text = cJSON_Print(record);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f)) ok = 0;
    cJSON_free(text);
    if (!ok) { ted_error("%s: cannot write: %s", path, strerror(errno)); return -1; }
    return 0;
}

long runinfo_ckpt_step(const char *dir) {
    char path[1300];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    ted_free(text);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "step");
    long step = cJSON_IsNumber(s) ? (long)s->valuedouble : -1;
    cJSON_Delete(root);
    return step;
}
