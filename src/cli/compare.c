// compare.c — where two runs part (see compare.h).
#include "cli/commands.h"
#include "core/alloc.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { long step; cJSON *metrics, *tensors; } StepLines;
typedef struct { StepLines *s; long n; cJSON **roots; long nroots; } Log;
typedef struct { double rtol, atol; } Tol;

static StepLines *step_of(Log *lg, long step) {
    for (long i = 0; i < lg->n; i++) if (lg->s[i].step == step) return &lg->s[i];
    lg->s[lg->n] = (StepLines){step, NULL, NULL};
    return &lg->s[lg->n++];
}

// Reads the step lines (the last one of a step wins: a resumed run appends) and the tensor lines.
static int load_log(const char *path, Log *lg) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) { ted_error("compare: %s: cannot read: %s", path, strerror(errno)); return -1; }
    long lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    lg->s = ted_alloc(sizeof(StepLines) * lines, MEM_TEMP);
    lg->roots = ted_alloc(sizeof(cJSON *) * lines, MEM_TEMP);
    long lineno = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        lineno++;
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsObject(j)) {
            ted_error("compare: %s: line %ld is not a JSON object", path, lineno);
            cJSON_Delete(j); ted_free(text);
            return -1;
        }
        lg->roots[lg->nroots++] = j;
        cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step"), *ts = cJSON_GetObjectItemCaseSensitive(j, "tensors_step");
        if (cJSON_IsNumber(st) && cJSON_GetObjectItemCaseSensitive(j, "loss")) step_of(lg, (long)st->valuedouble)->metrics = j;
        else if (cJSON_IsNumber(ts)) step_of(lg, (long)ts->valuedouble)->tensors = j;
    }
    ted_free(text);
    if (!lg->n) { ted_error("compare: %s: holds no training step", path); return -1; }
    return 0;
}

static void free_log(Log *lg) {
    for (long i = 0; i < lg->nroots; i++) cJSON_Delete(lg->roots[i]);
    ted_free(lg->roots); ted_free(lg->s);
}

static int differ(double a, double b, Tol t) {
    if (isnan(a) || isnan(b)) return !(isnan(a) && isnan(b));
    return fabs(a - b) > t.atol + t.rtol * fmax(fabs(a), fabs(b));
}

// Compares the numbers of object a with b's members of the same names (in a's order); the
// first that differs (or is missing in b) is reported. 1 when they part.
static int compare_members(const cJSON *a, const cJSON *b, long step, const char *what, Tol t) {
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (cJSON_IsArray(x)) {
            int n = cJSON_GetArraySize(x);
            for (int e = 0; e < n; e++) {
                const cJSON *u = cJSON_GetArrayItem(x, e), *v = cJSON_GetArrayItem(y, e);
                if (!cJSON_IsNumber(v) || differ(u->valuedouble, v->valuedouble, t)) {
                    printf("step %ld: %s %s[%d] parts: A %.9g, B %.9g\n", step, what, x->string, e, u->valuedouble,
                           cJSON_IsNumber(v) ? v->valuedouble : NAN);
                    return 1;
                }
            }
        } else if (cJSON_IsNumber(x)) {
            if (!cJSON_IsNumber(y) || differ(x->valuedouble, y->valuedouble, t)) {
                if (!cJSON_IsNumber(y)) printf("step %ld: %s %s is missing in B\n", step, what, x->string);
                else printf("step %ld: %s %s parts: A %.9g, B %.9g (relative %.2e)\n", step, what, x->string,
                            x->valuedouble, y->valuedouble, fabs(x->valuedouble - y->valuedouble) /
                            fmax(fabs(x->valuedouble), fabs(y->valuedouble)));
                return 1;
            }
        }
    }
    return 0;
}

static int compare_step(const StepLines *a, const StepLines *b, Tol t) {
    static const char *keys[] = {"loss", "lm_loss", "aux_loss", "val_loss"};
    if (a->metrics && b->metrics) {
        cJSON *ka = cJSON_CreateObject(), *kb = cJSON_CreateObject();
        for (int i = 0; i < 4; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(a->metrics, keys[i]);
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b->metrics, keys[i]);
            if (cJSON_IsNumber(x)) cJSON_AddNumberToObject(ka, keys[i], x->valuedouble);
            if (cJSON_IsNumber(y)) cJSON_AddNumberToObject(kb, keys[i], y->valuedouble);
        }
        int r = compare_members(ka, kb, a->step, "metric", t);
        cJSON_Delete(ka); cJSON_Delete(kb);
        if (r) return 1;
    }
    if (a->tensors && b->tensors) {
        const char *parts[] = {"tokens_per_expert", "grad_norm"}, *what[] = {"tokens per expert of", "grad norm of"};
        for (int i = 0; i < 2; i++)
            if (compare_members(cJSON_GetObjectItemCaseSensitive(a->tensors, parts[i]),
                                cJSON_GetObjectItemCaseSensitive(b->tensors, parts[i]), a->step, what[i], t))
                return 1;
    }
    if (a->metrics && b->metrics) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a->metrics, "grad_norm");
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b->metrics, "grad_norm");
        if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && differ(x->valuedouble, y->valuedouble, t)) {
            printf("step %ld: metric grad_norm parts: A %.9g, B %.9g\n", a->step, x->valuedouble, y->valuedouble);
            return 1;
        }
    }
    return 0;
}

// A near tie: the closest routing choice of a step came within this of the other way.
#define NEAR_TIE 1e-6

// After a parting at a step: its smallest routing margin in each log (--log-tensors), and whether
// that is a near tie (a choice that the rounding of another layout may route the other way).
static void say_margin(const StepLines *a, const StepLines *b) {
    const cJSON *x = a->tensors ? cJSON_GetObjectItemCaseSensitive(a->tensors, "route_margin") : NULL;
    const cJSON *y = b->tensors ? cJSON_GetObjectItemCaseSensitive(b->tensors, "route_margin") : NULL;
    if (!cJSON_IsNumber(x) && !cJSON_IsNumber(y)) return;
    double m = fmin(cJSON_IsNumber(x) ? x->valuedouble : INFINITY, cJSON_IsNumber(y) ? y->valuedouble : INFINITY);
    printf("step %ld: smallest routing margin: A %.3g, B %.3g: %s\n", a->step, cJSON_IsNumber(x) ? x->valuedouble : NAN,
           cJSON_IsNumber(y) ? y->valuedouble : NAN,
           m < NEAR_TIE ? "a near tie (< 1e-6), which rounding may route either way" : "no near tie (>= 1e-6)");
}

// Settings of a run record that do not change what the steps compute: where a run writes and
// reads back, how often it reports, threads, the layout and its optimizations (every layout equals
// one process; the micro-batch split is the layout's: the global batch is compared instead).
static int how_it_runs(const char *k) {
    static const char *const keys[] = {
        "log", "save", "save-every", "resume", "eval-every", "eval-windows", "log-every", "sample-every", "threads",
        "device", "peak-tflops", "keep-last", "overwrite", "watchdog", "tensorboard-dir", "log-tensors", "dry-run",
        "ranks", "steps_per_print", "wall_clock_breakdown", "micro-batch", "grad-accum", "train-batch-size", "tp", "ep",
        "pp", "pp-schedule", "pp-virtual", "pipeline.layers", "zero-stage", "overlap-comm", "overlap-degree",
        "progress-thread", "tile-size", "activation-checkpointing", "dtd", "cac", "zero_optimization.reduce_bucket_size",
        "zero_optimization.offload_optimizer.device", NULL};
    for (int i = 0; keys[i]; i++) if (!strcmp(k, keys[i])) return 1;
    return !strncmp(k, "tensorboard.", 12) || !strncmp(k, "csv_monitor.", 12);
}

// The first run record of a log ({"run": ...}), or NULL.
static const cJSON *run_record(const Log *lg) {
    for (long i = 0; i < lg->nroots; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(lg->roots[i], "run");
        if (cJSON_IsObject(r)) return r;
    }
    return NULL;
}

// "name A -> B" for a setting that differs (a missing one reads "none"); appended to out.
static void add_difference(char *out, size_t n, int *count, const char *name, const cJSON *x, const cJSON *y) {
    size_t k = strlen(out);
    if (k > n - 100) return;
    char *a = x ? cJSON_PrintUnformatted(x) : NULL, *b = y ? cJSON_PrintUnformatted(y) : NULL;
    snprintf(out + k, n - k, "%s%s %s -> %s", (*count)++ ? ", " : "", name, a ? a : "none", b ? b : "none");
    cJSON_free(a);
    cJSON_free(b);
}

// When both logs have a run record: the settings that change what the steps compute and differ
// (and the global batch), in one line: such runs are not expected to agree.
static void say_settings(const Log *la, const Log *lb) {
    const cJSON *ra = run_record(la), *rb = run_record(lb);
    if (!ra || !rb) return;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(ra, "config"), *cb = cJSON_GetObjectItemCaseSensitive(rb, "config"), *x;
    char msg[2048] = "";
    int count = 0;
    cJSON_ArrayForEach(x, ca) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(cb, x->string);
        if (!how_it_runs(x->string) && !(y && cJSON_Compare(x, y, 1))) add_difference(msg, sizeof msg, &count, x->string, x, y);
    }
    cJSON_ArrayForEach(x, cb)
        if (!how_it_runs(x->string) && !cJSON_GetObjectItemCaseSensitive(ca, x->string))
            add_difference(msg, sizeof msg, &count, x->string, NULL, x);
    const cJSON *ga = cJSON_GetObjectItemCaseSensitive(ra, "global_batch"), *gb = cJSON_GetObjectItemCaseSensitive(rb, "global_batch");
    if (ga && gb && !cJSON_Compare(ga, gb, 1)) add_difference(msg, sizeof msg, &count, "global batch", ga, gb);
    if (count) printf("note: the runs' settings differ (A -> B), so their losses need not agree: %s\n", msg);
}

static int parse_tol(const char *name, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : -1;
    if (!s || errno || *end || end == s || !(v >= 0) || !isfinite(v)) {
        ted_error("compare: %s must be a number >= 0, got \"%s\"", name, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_compare(int argc, char **argv) {
    const char *files[2] = {NULL, NULL};
    Tol t = {1e-4, 1e-8};
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ted compare A.jsonl B.jsonl [--rtol X] [--atol X]\n"
                   "  The first step and value where two training logs part: losses, tokens per expert and\n"
                   "  per-tensor gradient norms (runs with --log-tensors). |a-b| > atol + rtol*max(|a|,|b|)\n"
                   "  parts (defaults rtol 1e-4, atol 1e-8). Exit 0: no divergence; 1: they part.\n"
                   "  With --log-tensors a parting step also shows its smallest routing margin in each log, and\n"
                   "  whether it is a near tie (< 1e-6: a choice that rounding may route either way).\n"
                   "  When the logs' run records differ in a setting that changes what the steps compute (not the\n"
                   "  layout, where they write or how often they report), a note names each first.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--rtol")) { if (parse_tol("--rtol", i + 1 < argc ? argv[++i] : NULL, &t.rtol)) return TED_EXIT_USAGE; }
        else if (!strcmp(argv[i], "--atol")) { if (parse_tol("--atol", i + 1 < argc ? argv[++i] : NULL, &t.atol)) return TED_EXIT_USAGE; }
        else if (nf < 2 && strncmp(argv[i], "--", 2)) files[nf++] = argv[i];
        else { ted_error("compare: unexpected argument \"%s\" (see ted compare --help)", argv[i]); return TED_EXIT_USAGE; }
    }
    if (nf != 2) { ted_error("compare: needs two logs, A.jsonl and B.jsonl"); return TED_EXIT_USAGE; }
    Log a = {0}, b = {0};
    if (load_log(files[0], &a) || load_log(files[1], &b)) { free_log(&a); free_log(&b); return TED_EXIT_USAGE; }
    say_settings(&a, &b);
    long common = 0;
    int parted = 0;
    for (long i = 0; i < a.n && !parted; i++) {
        StepLines *sb = NULL;
        for (long k = 0; k < b.n; k++) if (b.s[k].step == a.s[i].step) sb = &b.s[k];
        if (!sb) continue;
        common++;
        parted = compare_step(&a.s[i], sb, t);
        if (parted) say_margin(&a.s[i], sb);
    }
    if (!parted && common == 0) { ted_error("compare: %s and %s share no step", files[0], files[1]); parted = 2; }
    else if (!parted) printf("no divergence over %ld common steps (rtol %g, atol %g)\n", common, t.rtol, t.atol);
    free_log(&a); free_log(&b);
    return parted == 2 ? TED_EXIT_USAGE : parted;
}
