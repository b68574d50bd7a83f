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

typedef ConfigSetting Setting;
typedef ConfigSettings Settings;

static cJSON *record;                // the run record (training runs only)

static void settings_of(const Config *c, Settings *S) { config_settings(c, S); }

static const char *from_name(char f) {
    return f == 'f' ? "flag" : f == 'j' ? "json" : f == 'c' ? "checkpoint" : "default";
}

static const char *config_path(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) return i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(argv[i], "--config=", 9)) return argv[i] + 9;
    }
    return NULL;
}


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

void runinfo_warn_changes(const Config *c, const char *dir) {
    Settings *S = ted_alloc(sizeof *S, MEM_TEMP);
    settings_of(c, S);
    char path[1300];
    snprintf(path, sizeof path, "%s/run.json", dir);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) { ted_free(S); return; }   // a checkpoint written before run.json existed
    cJSON *root = cJSON_Parse(text);
    ted_free(text);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "run"), "config");
    char msg[2048] = "";
    size_t n = 0;
    for (int i = 0; cfg && i < S->n && n < sizeof msg - 200; i++) {
        const Setting *s = &S->s[i];
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(cfg, s->name);
        if (config_is_model_key(s) || quiet_on_resume(s->name) || !j || same_value(s, j)) continue;
        if (!strcmp(s->name, "min-lr") && config_origin(i) == 'd') continue;   // lr/10 follows lr
        char *old = cJSON_PrintUnformatted(j);
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s %s -> %s", n ? ", " : "", s->name, old, s->value);
        cJSON_free(old);
    }
    if (n) printf("warning: resuming with training keys that differ from the checkpoint's run: %s\n", msg);
    cJSON_Delete(root);
    ted_free(S);
}

int runinfo_check_batch(const Config *c, int dp) {
    long have = cfg_global_batch(c, dp);
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
        if (config_origin(i) != from) continue;
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
    long gbatch = cfg_global_batch(c, dp);
    cJSON_Delete(record);
    record = cJSON_CreateObject();
    cJSON *run = cJSON_AddObjectToObject(record, "run");
    cJSON *av = cJSON_AddArrayToObject(run, "argv");
    for (int i = 0; i < argc; i++) cJSON_AddItemToArray(av, cJSON_CreateString(argv[i]));
    cJSON *cfg = cJSON_AddObjectToObject(run, "config"), *from = cJSON_AddObjectToObject(run, "from");
    for (int i = 0; i < S->n; i++) {
        cJSON_AddItemToObject(cfg, S->s[i].name, value_json(&S->s[i]));
        cJSON_AddStringToObject(from, S->s[i].name, from_name(config_origin(i)));
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

void runinfo_peak(const char *kind, double flops) {
    cJSON *run = cJSON_GetObjectItemCaseSensitive(record, "run");
    if (!run) return;
    cJSON *p = cJSON_AddObjectToObject(run, "mfu_peak");
    cJSON_AddStringToObject(p, "kind", kind);
    cJSON_AddNumberToObject(p, "gflops", round(flops * 1e-8) / 10);
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
