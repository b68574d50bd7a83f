// upcycle.c — a dense checkpoint grown into experts (see upcycle.h).
#include "io/upcycle.h"
#include "io/checkpoint.h"
#include "io/hfconfig.h"
#include "io/safetensors.h"
#include "io/savedir.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "core/util.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

// Where an expert tensor comes from: the dense FFN tensor of its block with the same role, cut
// along slice_dim into G parts (-1: whole), multiplied by G when scaled (the output
// projection, so that the G slices' renormalised gates, 1/G of a copy's each, sum back to it).
// A new architecture's FFN (gate/up/down) adds rows here.
typedef struct { const char *expert, *dense; int slice_dim, scaled; } Role;
static const Role gpt2_roles[] = {   // Conv1D layouts [in, out]
    {"c_fc.weight", "c_fc.weight", 1, 0},     // [d, f] -> [d, f/G]: columns j·f/G ...
    {"c_fc.bias", "c_fc.bias", 0, 0},         // [f] -> [f/G]
    {"c_proj.weight", "c_proj.weight", 0, 1}, // [f, d] -> [f/G, d]: rows, x G
    {"c_proj.bias", "c_proj.bias", -1, 0},    // [d]: each expert's; the gates sum to 1
    {NULL, NULL, 0, 0}};
static const Role llama_roles[] = {  // nn.Linear layouts [out, in]; Mixtral's w1 gate, w3 up, w2 down
    {"w1.weight", "gate_proj.weight", 0, 0},  // [f, d] -> [f/G, d]: rows
    {"w3.weight", "up_proj.weight", 0, 0},
    {"w2.weight", "down_proj.weight", 1, 1},  // [d, f] -> [d, f/G]: columns, x G
    {NULL, NULL, 0, 0}};

// Where an architecture keeps a block's tensors: the dense FFN's and the router's names.
typedef struct { const char *ffn, *router, *noise; const Role *roles; int router_rows; } ArchNames;
static const ArchNames gpt2_names = {"transformer.h.%d.mlp.%s", "transformer.h.%d.mlp.router.weight%n",
                                     "transformer.h.%d.mlp.router.noise_weight%n", gpt2_roles, 0};
static const ArchNames llama_names = {"model.layers.%d.mlp.%s", "model.layers.%d.block_sparse_moe.gate.weight%n",
                                      "model.layers.%d.block_sparse_moe.gate.noise_weight%n", llama_roles, 1};
static const ArchNames *names_of(const ModelConfig *m) { return cfg_is_llama(m) ? &llama_names : &gpt2_names; }

static const float ROUTER_STD = 0.02f;   // the router's init in model.c

// Why a router kind cannot start equal to the dense model with granularity G, or NULL: topk
// (the k >= 2 gates renormalised; top-1 is check_opts'), and noisy_topk without granularity (its
// gates are a softmax over the chosen scores, so they sum to 1 even for k = 1, and every copy is
// the same FFN whichever the noise picks).
static const char *router_refusal(const char *name, int G) {
    if (!strcmp(name, "topk") || !strcmp(name, "mixtral")) return NULL;
    if (!strcmp(name, "noisy_topk")) return G == 1 ? NULL : "its noise picks slices of different copies (granularity > 1)";
    if (!strcmp(name, "switch")) return "its top-1 gate is p_e (not renormalised) and it jitters its input";
    if (!strcmp(name, "gshard")) return "it drops second choices at random, and a dropped share is lost";
    if (!strcmp(name, "expert_choice")) return "a token may be taken by no expert";
    return "it is not a router kind (topk, mixtral, noisy_topk, switch, gshard, expert_choice)";
}

static int router_kind(const char *name) {
    for (int k = 0; k < ROUTER_KINDS; k++) if (!strcmp(name, router_names[k])) return k;
    return ROUTER_TOPK;
}

// The options against the dense model; *K the coarse top-k. 0 or -1 after one line.
static int check_opts(const UpcycleOpts *o, const ModelConfig *m, const char *dir, int *K) {
    int E = o->experts, G = o->granularity, f = cfg_ffn(m);
    const char *why = router_refusal(o->router, G);
#define NO(cond, ...) if (cond) { ted_error(__VA_ARGS__); return -1; }
    NO(m->num_experts > 1, "upcycle: %s is already an MoE (num_experts %d): upcycling takes a dense checkpoint", dir, m->num_experts)
    NO(why, "upcycle: --router %s cannot start equal to the dense model: %s (use topk or mixtral)", o->router, why)
    NO(E < 2, "upcycle: --num-experts must be >= 2, got %d", E)
    NO(G < 1, "upcycle: --granularity must be >= 1, got %d", G)
    NO(E % G, "upcycle: --num-experts %d is not a multiple of --granularity %d (E = G x copies)", E, G)
    NO(f % G, "upcycle: the FFN's inner size %d is not a multiple of --granularity %d", f, G)
    NO(o->moe_every < 1 || o->moe_every > m->n_layer, "upcycle: --moe-every must be in [1, n_layer %d], got %d", m->n_layer, o->moe_every)
    *K = o->top_k > 0 ? o->top_k : (E / G < 2 ? 1 : 2);
    NO(*K > E / G, "upcycle: --top-k %d exceeds the %d copies (--num-experts %d / --granularity %d)", *K, E / G, E, G)
    NO(*K * G < 2 && router_kind(o->router) == ROUTER_TOPK, "upcycle: top-1 without granularity gives gate p_e, not 1 (topk renormalises only k >= 2): use "
       "--top-k >= 2 or --granularity >= 2")
#undef NO
    return 0;
}

// The MoE model: the dense one's shape, ted's default routing keys, then upcycling's.
static Config moe_config(const Config *dense, const UpcycleOpts *o, int K) {
    Config c = *dense, d;
    config_defaults(&d);
    ModelConfig *m = &c.model;
    int f = cfg_ffn(&dense->model);
    const ModelConfig keep = *m;
    *m = d.model;
    m->vocab_size = keep.vocab_size; m->n_positions = keep.n_positions; m->n_embd = keep.n_embd;
    m->n_layer = keep.n_layer; m->n_head = keep.n_head; m->n_inner = f;
    m->arch = keep.arch; m->n_kv_head = keep.n_kv_head; m->rope_theta = keep.rope_theta;
    m->rms_norm_eps = keep.rms_norm_eps; m->tie_word_embeddings = keep.tie_word_embeddings;
    m->qkv_bias = keep.qkv_bias;   // the attention is the dense model's, biases and all
    m->num_experts = o->experts; m->top_k = K * o->granularity; m->moe_every = o->moe_every;
    m->expert_inner = f / o->granularity; m->router = router_kind(o->router);
    m->expert_type = cfg_is_llama(m) ? EXPERT_SWIGLU : EXPERT_GELU;   // the dense FFN's kind
    m->capacity_factor = 0;   // dropless: a dropped choice would break the equality
    return c;
}

// Expert tensor p (expert e = copy·G + j) from the dense tensor src of its role.
static void from_dense(const Param *p, const Param *src, const Role *r, int G) {
    int j = p->expert % G;
    long R = p->shape[0], C = p->shape[1];
    float s = r->scaled ? (float)G : 1.0f;
    for (long a = 0; a < R; a++)
        for (long b = 0; b < C; b++) {
            long i = r->slice_dim == 0 ? (j * R + a) * src->shape[1] + b
                   : r->slice_dim == 1 ? a * src->shape[1] + j * C + b : a * C + b;
            p->w[a * C + b] = s * src->w[i];
        }
}

// Router [d, E] (gpt2) or [E, d] (rows: llama's gate): expert c·G + j's weights = copy c's of
// N(0, ROUTER_STD) [d, E/G] drawn from (seed, name).
static void init_router(const Param *p, int G, uint64_t seed, int rows) {
    long E = rows ? p->shape[0] : p->shape[1], D = rows ? p->shape[1] : p->shape[0], C = E / G;
    uint64_t stream = rng_hash_str(p->name);
    for (long a = 0; a < D; a++)
        for (long e = 0; e < E; e++)
            p->w[rows ? e * D + a : a * E + e] = ROUTER_STD * rng_normal(seed, stream, (uint64_t)(a * C + e / G));
}

// Parameter p of the MoE model from the dense model D (used[i]: D's tensor i was read). 0 or -1
// after one line.
static int fill(const Model *D, const Param *p, const UpcycleOpts *o, char *used) {
    const ArchNames *a = names_of(&D->m);
    char name[160];
    int layer, end = 0;
    if (sscanf(p->name, a->router, &layer, &end) == 1 && end && !p->name[end]) {
        init_router(p, o->granularity, o->seed, a->router_rows);
        return 0;
    }
    end = 0;
    if (sscanf(p->name, a->noise, &layer, &end) == 1 && end && !p->name[end]) {
        memset(p->w, 0, sizeof(float) * p->numel);   // noisy_topk's noise starts at softplus(0)
        return 0;
    }
    const Role *r = NULL;
    for (const Role *k = a->roles; p->expert >= 0 && k->expert; k++)
        if (!strcmp(p->suffix, k->expert)) r = k;
    if (p->expert >= 0 && !r) { ted_error("upcycle: no dense tensor for the expert tensor %s", p->name); return -1; }
    if (r) snprintf(name, sizeof name, a->ffn, p->layer, r->dense);
    else snprintf(name, sizeof name, "%s", p->name);
    int i = reg_find(&D->reg, name);
    if (i < 0) { ted_error("upcycle: the dense model has no tensor %s (for %s)", name, p->name); return -1; }
    const Param *src = &D->reg.p[i];
    used[i] = 1;
    if (r) from_dense(p, src, r, o->granularity);
    else if (src->numel != p->numel) { ted_error("upcycle: %s differs in size from the dense model's", p->name); return -1; }
    else memcpy(p->w, src->w, sizeof(float) * p->numel);
    return 0;
}

// model.safetensors (full tensors: one process) and config.json into dir.
static int write_folder(const char *dir, const Model *M, const Config *c) {
    const Registry *r = &M->reg;
    StTensor *t = ted_alloc(sizeof(StTensor) * r->n, MEM_TEMP);
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        snprintf(t[i].name, sizeof t[i].name, "%s", p->name);
        t[i].ndim = p->ndim; t[i].shape[0] = p->save_rows; t[i].shape[1] = p->shape[1];
        t[i].data = p->w;   // the first save_rows rows: a padded vocabulary's rows are not stored
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_write(path, t, r->n);
    ted_free(t);
    if (rc) return -1;
    char *cfg = hf_config_json(c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    rc = !f || fputs(cfg, f) < 0 || fflush(f) || fsync(fileno(f));
    if (f && fclose(f)) rc = 1;
    ted_free(cfg);
    if (rc) { ted_error("%s: cannot write: %s", path, strerror(errno)); return -1; }
    return 0;
}

// The MoE model built from D and written to a temporary folder renamed to o->save.
static int build_and_write(const Model *D, const Config *mc, const UpcycleOpts *o, UpcycleResult *res) {
    Model M;
    model_build(&M, mc, D->topo, 1, D->T);
    int rc = 0;
    char *used = ted_alloc((size_t)D->reg.n, MEM_TEMP);
    for (int i = 0; i < M.reg.n && !rc; i++) rc = fill(D, &M.reg.p[i], o, used);
    for (int i = 0; i < D->reg.n && !rc; i++)   // nothing of the dense model is dropped on the way
        if (!used[i]) { ted_error("upcycle: the MoE model has no place for the dense model's %s", D->reg.p[i].name); rc = -1; }
    ted_free(used);
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", o->save, (int)getpid());
    if (!rc && mkdir(tmp, 0777)) { ted_error("--save %s: cannot create %s: %s", o->save, tmp, strerror(errno)); rc = -1; }
    else if (!rc) {
        rc = write_folder(tmp, &M, mc);
        if (!rc && (savedir_fsync(tmp) || rename(tmp, o->save))) {
            ted_error("--save %s: cannot move %s into place: %s", o->save, tmp, strerror(errno));
            rc = -1;
        }
        if (rc) savedir_rm_tree(tmp);
    }
    res->params = model_num_params(&mc->model);
    model_free(&M);
    return rc;
}

// Bytes model_build allocates for c: fp32 weights and gradients, and the activations; *params the count.
static double build_bytes(const Config *c, const Topology *t, int T, double *params) {
    ModelSize z;
    model_size(&z, c, t, 1, T);
    *params = z.params[0] + z.params[1];
    double b = 8 * *params + z.act;
    model_size_free(&z);
    return b;
}

// Before anything is built: both models fit this node's memory, and the new folder's filesystem
// has room for the MoE weights. Then a line says what is being built (a large E takes a while).
static int check_room(const Config *dc, const Config *mc, const Topology *t, int T, const UpcycleOpts *o) {
    double pd, pm, need = build_bytes(dc, t, T, &pd) + build_bytes(mc, t, T, &pm), mem = mem_physical_bytes();
    if (mem > 0 && need > mem) {
        ted_error("upcycle: --num-experts %d: the MoE model's %.4g parameters and the dense model's need %.4g bytes "
                  "(weights, gradients, activations), more than this node's %.4g bytes of memory", o->experts, pm, need, mem);
        return -1;
    }
    char parent[1100];
    snprintf(parent, sizeof parent, "%s", o->save);
    char *slash = strrchr(parent, '/');   // the folder it goes into: "a/x" → "a", "/x" → "/", "x" → "."
    if (!slash) snprintf(parent, sizeof parent, ".");
    else slash[slash == parent] = 0;
    struct statvfs fs;
    double bytes = 4 * pm + (1 << 20), room = statvfs(parent, &fs) ? -1 : (double)fs.f_bavail * fs.f_frsize;
    if (room >= 0 && bytes > room) {
        ted_error("upcycle: --save %s: needs %.0f bytes, its filesystem has %.0f free", o->save, bytes, room);
        return -1;
    }
    printf("upcycle: building %d experts, %.4g parameters (%.4g bytes to write)\n", o->experts, pm, 4 * pm);
    fflush(stdout);
    return 0;
}

int upcycle_run(const UpcycleOpts *o, UpcycleResult *res) {
    struct stat sb;
    if (!stat(o->save, &sb)) { ted_error("--save %s: exists; upcycle writes a new folder and overwrites nothing", o->save); return -1; }
    if (ckpt_resolve(o->load, res->dense, sizeof res->dense)) return -1;
    Config dc;
    config_defaults(&dc);
    int K;
    if (ckpt_read_config(res->dense, &dc) || check_opts(o, &dc.model, res->dense, &K)) return -1;
    Config mc = moe_config(&dc, o, K);
    if (config_validate(&mc)) return -1;
    Topology topo;
    topo_init(&topo, 1, 1, 1);
    Model D;
    int T = cfg_seq_len(&dc);
    if (check_room(&dc, &mc, &topo, T, o)) return -1;
    model_build(&D, &dc, &topo, 1, T);
    int rc = ckpt_load_weights(res->dense, &D);   // names, shapes, finiteness
    if (!rc) rc = build_and_write(&D, &mc, o, res);
    model_free(&D);
    res->copies = o->experts / o->granularity; res->top_k = mc.model.top_k;
    res->expert_inner = mc.model.expert_inner;
    res->moe_blocks = 0;
    for (int l = 0; l < mc.model.n_layer; l++) res->moe_blocks += cfg_is_moe(&mc.model, l);
    return rc;
}
