// tune.c — `ted tune --config model.json --cluster NAME|FILE [--gpus N] [--global-batch B] [--json]`:
// every layout (pp, tp, ep, dp, ZeRO stage, DTD, CAC, activation checkpointing, micro-batch and
// accumulation for the global batch) that ted train accepts on the cluster's devices (its own
// rules, --device cuda on a GPU cluster), costed by the performance model (perf/perfmodel.h); the
// ten fastest that fit in memory, their split, and the line that runs the best as printed. --json:
// every evaluated layout as one JSON object per line.
#include "cli/commands.h"
#include "config/config.h"
#include "core/alloc.h"
#include "core/util.h"
#include "parallel/comm.h"
#include "perf/calibrate.h"
#include "model/model.h"
#include "perf/perfmodel.h"
#include "run/run.h"
#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { Layout y; Prediction p; } Option;
// The layouts ted train refuses: the first reasons met, with how many layouts each.
#define REASONS 4
typedef struct { char why[REASONS][256], plain[256]; long n[REASONS], total; } Refusals;
typedef struct { Option *o; int n, cap; Refusals no; } Options;

typedef struct {
    const char *config, *cluster, *data, *device;
    int gpus, json, traffic, calibrate;
    const char *out;
    long global;
    Layout want;   // a train flag given to tune fixes that field (-1: free)
} TuneArgs;

static int divides(long a, long b) { return a > 0 && b % a == 0; }

// y agrees with every field the user fixed
static int wanted(const Layout *y, const Layout *w) {
    return (w->pp < 0 || y->pp == w->pp) && (w->tp < 0 || y->tp == w->tp) && (w->ep < 0 || y->ep == w->ep) &&
           (w->zero < 0 || y->zero == w->zero) && (w->dtd < 0 || y->dtd == w->dtd) && (w->cac < 0 || y->cac == w->cac) &&
           (w->ckpt < 0 || y->ckpt == w->ckpt) && (w->micro_batch < 0 || y->micro_batch == w->micro_batch) &&
           (w->accum < 0 || y->accum == w->accum) && (w->overlap_degree < 0 || y->overlap_degree == w->overlap_degree) &&
           (w->overlap_comm < 0 || y->overlap_comm == w->overlap_comm);
}

// ted train's own rules for a run of k on `world` processes: 1 with the first broken rule in why.
// (config_validate as ted train calls it, its lines captured, not printed; then the layout's.)
static int train_refuses(const Config *k, int world, char *why, size_t n) {
    ted_error_capture(why, n);
    int bad = config_validate(k) || run_check_layout(k, world);
    ted_error_capture(NULL, 0);
    return bad;
}

// The config ted train runs for the best line's flags on c: layout y's fields; pipeline.layers
// stays the config's (no flag drops it).
static void line_config(Config *k, const Config *c, const Layout *y) {
    perf_layout_config(k, c, y);
    k->pp_nlayers = c->pp_nlayers;
}

// plain: a layout without the optional overlap and recompute (its reason says why nothing runs).
static void refused(Refusals *r, const char *why, int plain) {
    r->total++;
    if (plain && !r->plain[0]) snprintf(r->plain, sizeof r->plain, "%s", why);
    for (int i = 0; i < REASONS; i++)
        if (!r->why[i][0] || !strcmp(r->why[i], why)) {
            snprintf(r->why[i], sizeof r->why[i], "%s", why);
            r->n[i]++;
            return;
        }
}

static void keep(Options *s, const Layout *y, const Config *c, const Cluster *cl) {
    Config k;
    char why[256];
    line_config(&k, c, y);
    if (train_refuses(&k, y->pp * y->tp * y->dp, why, sizeof why)) {
        refused(&s->no, why, y->overlap_degree == 1 && !y->overlap_comm && !y->dtd && !y->ckpt);
        return;
    }
    if (s->n == s->cap) { s->cap = s->cap ? 2 * s->cap : 256; s->o = ted_realloc(s->o, sizeof(Option) * s->cap, MEM_TEMP); }
    s->o[s->n].y = *y;
    perf_predict(&s->o[s->n].p, &k, y, cl);
    s->n++;
}

// Overlap: the all-to-all in 1, 2 or 4 chunks (with expert parallelism, as far as the capacity allows),
// overlap_comm off or on (with data parallelism); ted train's rules refuse what a device cannot run.
static void each_overlap(Options *s, Layout y, const Config *c, const Cluster *cl, const Layout *w) {
    int moe = c->model.num_experts > 1 && y.ep > 1, most = model_overlap_max(c, cfg_seq_len(c));
    for (y.overlap_degree = 1; y.overlap_degree <= (moe ? 4 : 1) && y.overlap_degree <= most; y.overlap_degree *= 2)
        for (y.overlap_comm = 0; y.overlap_comm <= (y.dp > 1); y.overlap_comm++)
            if (wanted(&y, w)) keep(s, &y, c, cl);
}

// The TED options of one parallel layout: ZeRO stage, DTD, checkpointing, CAC, batch split.
static void each_option(Options *s, Layout y, const Config *c, const Cluster *cl, long global, const Layout *w) {
    const ModelConfig *m = &c->model;
    int moe = m->num_experts > 1;
    for (y.zero = 0; y.zero <= (y.pp > 1 ? 1 : 2); y.zero++)
        for (y.dtd = 0; y.dtd <= (moe && y.tp > 1); y.dtd++)
            for (y.ckpt = 0; y.ckpt <= 1; y.ckpt++)
                for (y.cac = 0; y.cac <= y.ckpt; y.cac++)
                    for (y.micro_batch = 1; y.micro_batch <= global / y.dp; y.micro_batch++) {
                        if (!divides((long)y.micro_batch * y.dp, global)) continue;
                        y.accum = (int)(global / ((long)y.micro_batch * y.dp));
                        each_overlap(s, y, c, cl, w);
                    }
}

// Every (pp, tp, ep, dp) of G ranks (design §4); ted train's rules then judge each (keep).
static void enumerate(Options *s, const Config *c, const Cluster *cl, int G, long global, const Layout *w) {
    const ModelConfig *m = &c->model;
    Layout y = {.wbytes = precision_bytes(cfg_precision(c))};
    for (y.pp = 1; y.pp <= G && y.pp <= m->n_layer; y.pp++) {
        if (G % y.pp) continue;
        for (y.tp = 1; y.tp <= G / y.pp; y.tp++) {   // TP across nodes is allowed, and costed
            if ((G / y.pp) % y.tp) continue;
            y.dp = G / (y.pp * y.tp);
            for (y.ep = 1; y.ep <= y.dp; y.ep++)
                if (y.dp % y.ep == 0 && global % y.dp == 0) each_option(s, y, c, cl, global, w);
        }
    }
}

static int by_time(const void *a, const void *b) {
    const Option *x = a, *y = b;
    if (x->p.fits != y->p.fits) return y->p.fits - x->p.fits;
    return (x->p.step_ms > y->p.step_ms) - (x->p.step_ms < y->p.step_ms);
}

static void print_json(const Option *o) {
    const Layout *y = &o->y;
    const Prediction *p = &o->p;
    printf("{\"pp\": %d, \"tp\": %d, \"ep\": %d, \"dp\": %d, \"zero_stage\": %d, \"dtd\": %d, \"cac\": %d, "
           "\"activation_checkpointing\": %d, \"micro_batch\": %d, \"grad_accum\": %d, \"overlap_degree\": %d, "
           "\"overlap_comm\": %d, \"hidden_ms\": %.4g, \"step_ms\": %.4g, "
           "\"compute_ms\": %.4g, \"comm_ms\": %.4g, \"bubble_ms\": %.4g, \"mem_bytes\": %.0f, \"state_bytes\": %.0f, "
           "\"act_bytes\": %.0f, \"opt_temp_bytes\": %.0f, \"fits\": %s, \"comm\": {",
           y->pp, y->tp, y->ep, y->dp, y->zero, y->dtd, y->cac, y->ckpt, y->micro_batch, y->accum, y->overlap_degree,
           y->overlap_comm, p->hidden_ms, p->step_ms, p->compute_ms, p->comm_ms, p->bubble_ms, p->mem_bytes, p->state_bytes, p->act_bytes, p->opt_temp_bytes,
           p->fits ? "true" : "false");
    int first = 1;
    for (int c = 0; c < COLL_N; c++)
        for (int g = 0; g < GROUP_N; g++)
            if (p->coll_ms[c][g] > 0) {
                printf("%s\"%s.%s\": %.4g", first ? "" : ", ", comm_coll_name(c), comm_group_name(g), p->coll_ms[c][g]);
                first = 0;
            }
    printf("}}\n");
}

// The two largest collectives of a prediction, as "name ms, name ms".
static void top_colls(const Prediction *p, char *out, size_t n) {
    int bc[2] = {-1, -1}, bg[2] = {-1, -1};
    for (int c = 0; c < COLL_N; c++)
        for (int g = 0; g < GROUP_N; g++)
            for (int i = 0; i < 2; i++)
                if (bc[i] < 0 || p->coll_ms[c][g] > p->coll_ms[bc[i]][bg[i]]) {
                    if (i == 0) { bc[1] = bc[0]; bg[1] = bg[0]; }
                    bc[i] = c; bg[i] = g;
                    break;
                }
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < 2 && bc[i] >= 0 && p->coll_ms[bc[i]][bg[i]] > 0; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%s.%s %.1f", i ? ", " : "", comm_coll_name(bc[i]),
                              comm_group_name(bg[i]), p->coll_ms[bc[i]][bg[i]]);
}

static void print_table(const Options *s, const Cluster *cl, int G) {
    printf("%-4s %3s %3s %3s %4s %4s %3s %3s %4s %3s %5s %3s %3s %10s %10s %9s %8s %8s  %s\n", "rank", "pp", "tp", "ep", "dp",
           "zero", "dtd", "cac", "ckpt", "mb", "accum", "od", "oc", "step ms", "compute", "comm", "bubble", "mem GB",
           "largest collectives (ms)");
    int shown = 0;
    for (int i = 0; i < s->n && shown < 10; i++) {
        const Option *o = &s->o[i];
        if (!o->p.fits) break;
        char top[160];
        top_colls(&o->p, top, sizeof top);
        printf("%-4d %3d %3d %3d %4d %4d %3d %3d %4d %3d %5d %3d %3d %10.1f %10.1f %9.1f %8.1f %8.2f  %s\n", ++shown, o->y.pp,
               o->y.tp, o->y.ep, o->y.dp, o->y.zero, o->y.dtd, o->y.cac, o->y.ckpt, o->y.micro_batch, o->y.accum,
               o->y.overlap_degree, o->y.overlap_comm, o->p.step_ms, o->p.compute_ms, o->p.comm_ms, o->p.bubble_ms,
               o->p.mem_bytes / 1e9, top);
    }
    if (!shown) printf("no layout fits in %.3g GB per device\n", cl->mem / 1e9);
    (void)G;
}

// The path of this ted binary (what the best line runs), else "ted".
static void exe_path(char *out, size_t n) {
    ssize_t k = readlink("/proc/self/exe", out, n - 1);
    if (k <= 0) snprintf(out, n, "ted");
    else out[k] = 0;
}

// The launcher of G ranks: none for one; mpirun on one node of the cluster; a hostfile beyond.
static void print_launcher(const Cluster *cl, int G) {
    if (G == 1) return;
    printf("mpirun -np %d%s", G, geteuid() == 0 ? " --allow-run-as-root" : "");
    if (G > cl->per_node) printf(" --hostfile HOSTS --map-by ppr:%d:node", cl->per_node);
    printf(" ");
}

// The line that runs layout o as printed: the user's config and data, the cluster's device and the
// precision tune assumed (c0: the config as read, c: as tune runs it), every field of the layout.
static void print_best(const Option *o, const TuneArgs *a, const Config *c0, const Config *c, const Cluster *cl, int G) {
    const Layout *y = &o->y;
    Config k;
    char exe[1024];
    line_config(&k, c, y);
    exe_path(exe, sizeof exe);
    printf("\nbest: ");
    print_launcher(cl, G);
    printf("%s train --config %s --data %s%s%s --tp %d --ep %d --pp %d --zero-stage %d", exe, a->config,
           a->data ? a->data : "DATA", k.device == DEV_CUDA ? " --device cuda" : "", k.bf16 && !c0->bf16 ? " --bf16" : "",
           y->tp, y->ep, y->pp, y->zero);
    if (k.pp_schedule != c0->pp_schedule) printf(" --pp-schedule 1f1b");   // the one schedule a layout changes to
    if (k.pp_virtual != c0->pp_virtual) printf(" --pp-virtual %d", k.pp_virtual);
    printf("%s%s%s --micro-batch %d --grad-accum %d", y->dtd ? " --dtd" : "", y->ckpt ? " --activation-checkpointing" : "",
           y->cac ? " --cac" : "", y->micro_batch, y->accum);
    if (y->overlap_degree != c0->overlap_degree || y->overlap_degree > 1) printf(" --overlap-degree %d", y->overlap_degree);
    if (k.train_batch_size != c0->train_batch_size) printf(" --train-batch-size %d", k.train_batch_size);
    printf("%s\n", y->overlap_comm ? " --overlap-comm" : "");
    if (G > cl->per_node || !a->data)
        printf("  (%s%s%s)\n", G > cl->per_node ? "HOSTS: a hostfile of the nodes" : "",
               G > cl->per_node && !a->data ? "; " : "", a->data ? "" : "DATA: the training data, or give tune --data");
}

// The layouts left out because ted train refuses them, by reason.
static void print_refused(const Refusals *r, const Config *c) {
    if (!r->total) return;
    printf("\nleft out: %ld layouts that ted train%s refuses:\n", r->total, c->device == DEV_CUDA ? " --device cuda" : "");
    long shown = 0, done[REASONS] = {0};
    for (int k = 0; k < REASONS; k++) {   // the most frequent first
        int top = -1;
        for (int i = 0; i < REASONS; i++)
            if (r->why[i][0] && !done[i] && (top < 0 || r->n[i] > r->n[top])) top = i;
        if (top < 0) break;
        done[top] = 1;
        printf("  %6ld  %s\n", r->n[top], r->why[top]);
        shown += r->n[top];
    }
    if (shown < r->total) printf("  %6ld  for other reasons\n", r->total - shown);
}

// The train flags that fix a field of the layout: ints, then switches.
static int *layout_field(Layout *w, const char *f) {
    static const char *const names[] = {"--pp", "--tp", "--ep", "--zero-stage", "--micro-batch", "--grad-accum",
                                        "--overlap-degree", "--dtd", "--cac", "--activation-checkpointing", "--overlap-comm"};
    int *fields[] = {&w->pp, &w->tp, &w->ep, &w->zero, &w->micro_batch, &w->accum, &w->overlap_degree,
                     &w->dtd, &w->cac, &w->ckpt, &w->overlap_comm};
    for (int i = 0; i < 11; i++) if (!strcmp(f, names[i])) return fields[i];
    return NULL;
}

static int parse_args(TuneArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    memset(&a->want, -1, sizeof a->want);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        int *field = layout_field(&a->want, f);
        if (!strcmp(f, "--json")) { a->json = 1; continue; }
        if (!strcmp(f, "--traffic")) { a->traffic = 1; continue; }
        if (!strcmp(f, "--calibrate")) { a->calibrate = 1; continue; }
        if (field && (!strcmp(f, "--dtd") || !strcmp(f, "--cac") || !strcmp(f, "--activation-checkpointing") ||
                      !strcmp(f, "--overlap-comm"))) { *field = 1; continue; }
        if (!v) { ted_error("tune: %s needs a value (ted tune --help)", f); return -1; }
        i++;
        if (field) {
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 0 || n > 1000000) { ted_error("tune: %s must be an integer in [0, 1000000], got \"%s\"", f, v); return -1; }
            *field = (int)n;
        } else if (!strcmp(f, "--config")) a->config = v;
        else if (!strcmp(f, "--data")) a->data = v;
        else if (!strcmp(f, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) { ted_error("tune: --device must be cpu or cuda, got \"%s\"", v); return -1; }
            a->device = v;
        }
        else if (!strcmp(f, "--out")) a->out = v;
        else if (!strcmp(f, "--cluster")) a->cluster = v;
        else if (!strcmp(f, "--gpus") || !strcmp(f, "--global-batch")) {
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 1 || n > 1000000) { ted_error("tune: %s must be an integer in [1, 1000000], got \"%s\"", f, v); return -1; }
            if (f[2] == 'g' && f[3] == 'p') a->gpus = (int)n; else a->global = n;
        } else { ted_error("tune: unknown option \"%s\" (ted tune --help)", f); return -1; }
    }
    if (!a->calibrate && (!a->config || !a->cluster)) {
        ted_error("tune: needs --config FILE and --cluster NAME|FILE, or --calibrate (ted tune --help)");
        return -1;
    }
    return 0;
}

// --traffic: the one layout `ted train` would run with these flags (what is not given: the config's
// value, or 1 for a parallel degree).
static void train_defaults(Layout *w, const Config *c) {
    int given[] = {c->pp, c->tp, c->ep, c->zero_stage, c->micro_batch, c->grad_accum, c->dtd, c->cac, c->activation_checkpointing};
    int *f[] = {&w->pp, &w->tp, &w->ep, &w->zero, &w->micro_batch, &w->accum, &w->dtd, &w->cac, &w->ckpt};
    for (int i = 0; i < 9; i++) if (*f[i] < 0) *f[i] = given[i] > 0 ? given[i] : i < 3 ? 1 : given[i];
    if (w->overlap_degree < 0) w->overlap_degree = c->overlap_degree > 0 ? c->overlap_degree : 1;
    if (w->overlap_comm < 0) w->overlap_comm = c->overlap_comm;
}

// The predicted traffic of a layout's first stage, in the log's `comm` form.
static void print_traffic(const Option *o, const Config *c) {
    Traffic t;
    int T = cfg_seq_len(c);
    traffic_of(&t, &c->model, T, &o->y, 0);
    printf("{");
    int first = 1;
    for (int k = 0; k < COLL_N; k++)
        for (int g = 0; g < GROUP_N; g++)
            if (t.f[k][g].calls > 0) {
                printf("%s\"%s.%s\": {\"calls\": %.0f, \"bytes\": %.0f}", first ? "" : ", ", comm_coll_name(k),
                       comm_group_name(g), t.f[k][g].calls, t.f[k][g].bytes);
                first = 0;
            }
    printf("}\n");
}

// --calibrate [--out FILE]: the measured cluster file, written by rank 0 (a new file only).
static int calibrate(const TuneArgs *a) {
    Cluster cl;
    char note[512];
    if (a->out && comm_world_rank() == 0 && access(a->out, F_OK) == 0) {
        ted_error("tune --calibrate: --out %s exists (ted writes a new file only)", a->out);
        return ted_agree(1) ? TED_EXIT_USAGE : 0;
    }
    if (ted_agree(0) || perf_calibrate(&cl, note, sizeof note)) return TED_EXIT_USAGE;
    if (comm_world_rank()) return 0;
    char *text = cluster_json(&cl, note);
    FILE *f = a->out ? fopen(a->out, "wx") : stdout;
    int rc = f && fputs(text, f) >= 0 && (f == stdout || fclose(f) == 0) ? 0 : 1;
    if (rc) ted_error("tune --calibrate: cannot write %s: %s", a->out, strerror(errno));
    else if (a->out) printf("ted tune: wrote %s (%d node(s) x %d, %.4g GFLOP/s, intra %.3g GB/s %.3g us, inter %.3g GB/s %.3g us)\n",
                            a->out, cl.nodes, cl.per_node, cl.peak / 1e9, cl.intra.bw / 1e9, cl.intra.lat * 1e6,
                            cl.inter.bw / 1e9, cl.inter.lat * 1e6);
    ted_free(text);
    return rc;
}

static void help(void) {
    printf("usage: ted tune --config model.json --cluster NAME|FILE [--gpus N] [--global-batch B] [--data FILE]\n"
           "                [--device cpu|cuda] [--json]\n"
           "  Predicts the step time and memory of every layout (pp, tp, ep, dp, ZeRO stage, DTD, CAC,\n"
           "  activation checkpointing, micro-batch and accumulation) of the model on the cluster and prints\n"
           "  the ten fastest that fit, with the mpirun line of the best. --cluster: a JSON file or a preset of\n"
           "  configs/clusters/ (this-machine, namespace, dgx-a100, dgx-h100, summit). --gpus: devices to use\n"
           "  (default: all of the cluster). --global-batch: sequences per step (default the config's\n"
           "  train_batch_size, else micro-batch x accumulation). --json: every layout, one object per line.\n"
           "  ted train's --tp --ep --pp --zero-stage --micro-batch --grad-accum --dtd --cac\n"
           "  --activation-checkpointing --overlap-degree --overlap-comm fix that part of the layout (od: the\n"
           "  all-to-all's overlap degree, oc: overlap_comm). --traffic: the first stage's predicted\n"
           "  collectives of the best layout per step, in the log's comm form ({\"allreduce.tp\": {calls, bytes}}).\n"
           "  Every layout ranked passes ted train's own checks, on the device the run would use (--device:\n"
           "  default cuda on a GPU cluster, cpu elsewhere); the best line runs as printed (this binary,\n"
           "  --data FILE, --device cuda on a GPU cluster, --bf16 for an fp32 config); add --dry-run --ranks N\n"
           "  to check it here.\n"
           "usage: [mpirun -np R --hostfile H] ted tune --calibrate [--out FILE]\n"
           "  Measures the machines it runs on (one rank per device) and writes a cluster file: nodes and\n"
           "  ranks per node from the host names, the fp32 GEMM rate with every rank busy, memory per rank,\n"
           "  latency and bandwidth inside a node and between nodes (ping-pong from rank 0).\n");
}

// The config and cluster as tune runs them (c0: the config as read): the cluster's device, or
// --device; on a GPU the bf16 its peak is for, where the config computes fp32; --global-batch as
// train_batch_size where the config checks one; a switch the config turns on stays on (no flag of
// ted train turns it off). 0, or an exit code after one line.
static int setup(TuneArgs *a, Config *c0, Config *c, Cluster *cl) {
    config_defaults(c0);
    if (config_load_json(c0, a->config) || config_validate(c0) || cluster_load(cl, a->cluster)) return TED_EXIT_USAGE;
    *c = *c0;
    c->device = a->device ? (strcmp(a->device, "cuda") ? DEV_CPU : DEV_CUDA) : cl->gpu ? DEV_CUDA : DEV_CPU;
    if (c->device == DEV_CUDA && cfg_precision(c) == PREC_FP32) c->bf16 = 1;
    if (a->global && c->train_batch_size) c->train_batch_size = (int)a->global;
    int *fix[] = {&a->want.dtd, &a->want.cac, &a->want.ckpt, &a->want.overlap_comm};
    const int on[] = {c->dtd, c->cac, c->activation_checkpointing, c->overlap_comm};
    for (int i = 0; i < 4; i++) if (on[i] && *fix[i] < 0) *fix[i] = 1;
    if (a->traffic) train_defaults(&a->want, c);
    return 0;
}

static void print_header(const TuneArgs *a, const Config *c0, const Config *c, const Cluster *cl, int G, long global, int n) {
    printf("ted tune: %s on %s (%d of %d %s, %.4g TFLOP/s x %.2f, %.3g GB each), global batch %ld: %d layouts\n",
           a->config, cl->name, G, cluster_devices(cl), c->device == DEV_CUDA ? "GPUs: ted train --device cuda" : "CPU devices",
           cl->peak / 1e12, cl->gemm_eff, cl->mem / 1e9, global, n);
    if (c->bf16 && !c0->bf16)
        printf("  (in bf16, the precision of the GPU's peak and of the GPU path; the config computes fp32: the line adds --bf16)\n");
}

// Nothing to rank: one line, with why ted train refuses the plainest layout when it refused them all.
static int none_left(const Options *s, const Config *c, int G) {
    if (!s->no.total) { ted_error("tune: no layout of %d devices matches the options given", G); return TED_EXIT_USAGE; }
    ted_error("tune: ted train%s refuses every layout of %d devices that matches: %s", c->device == DEV_CUDA ? " --device cuda" : "",
              G, s->no.plain[0] ? s->no.plain : s->no.why[0]);
    return TED_EXIT_USAGE;
}

int cmd_tune(int argc, char **argv) {
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(); return 0; }
    TuneArgs a;
    Config c0, c;
    Cluster cl;
    if (parse_args(&a, argc, argv)) return TED_EXIT_USAGE;
    if (a.calibrate) return calibrate(&a);
    if (setup(&a, &c0, &c, &cl)) return TED_EXIT_USAGE;
    int G = a.gpus ? a.gpus : cluster_devices(&cl);
    long global = a.global ? a.global : c.train_batch_size ? c.train_batch_size : cfg_global_batch(&c, 1);
    if (a.traffic) global = (long)a.want.micro_batch * a.want.accum * (G / (a.want.pp * a.want.tp));   // as ted train runs it
    if (G > cluster_devices(&cl)) { ted_error("tune: --gpus %d exceeds the cluster's %d devices", G, cluster_devices(&cl)); return TED_EXIT_USAGE; }
    Options s = {0};
    enumerate(&s, &c, &cl, G, global, &a.want);
    qsort(s.o, (size_t)s.n, sizeof *s.o, by_time);
    int rc = s.n ? 0 : none_left(&s, &c, G);
    if (rc) ;
    else if (a.traffic) print_traffic(&s.o[0], &c);
    else if (a.json) for (int i = 0; i < s.n; i++) print_json(&s.o[i]);
    else {
        print_header(&a, &c0, &c, &cl, G, global, s.n);
        print_table(&s, &cl, G);
        if (s.o[0].p.fits) print_best(&s.o[0], &a, &c0, &c, &cl, G);
        print_refused(&s.no, &c);
    }
    ted_free(s.o);
    return rc;
}
