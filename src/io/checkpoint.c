// checkpoint.c — save and load (see checkpoint.h). Tensors are stored full: this rank's
// slices are placed through param_full_index, so the files do not depend on the layout.
#include "io/checkpoint.h"
#include "io/runinfo.h"
#include "parallel/onebit.h"
#include "core/alloc.h"
#include "parallel/comm.h"
#include "core/half.h"
#include "io/hfconfig.h"
#include "io/hf_import.h"
#include "io/safetensors.h"
#include "io/savedir.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) { ted_error("%s: cannot write: %s", path, strerror(errno)); return -1; }
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad) { ted_error("%s: write failed: %s", path, strerror(errno)); return -1; }
    return 0;
}


// Assembles on world rank 0 the full tensor of parameter i as held by EP rank s (its expert
// s·El + local index; non-expert tensors have s = 0). Every element has exactly one owner,
// which writes it: the TP rank holding its slice (tp rank 0 for tensors replicated over TP),
// the EP rank s, and in the data-parallel dimension the first replica (weights) or the ZeRO
// shard owner (Adam state, src). A sum over the world then gives the whole tensor.
static float *assemble(const Model *M, const Zero *z, int i, int s, const float *src) {
    const Registry *r = &M->reg;
    const Param *p = &r->p[i];
    const Topology *t = M->topo;
    long n = p->shape[0] * p->shape[1];
    float *full = ted_alloc(sizeof(float) * n, MEM_COMM);
    int owner = (p->split_dim >= 0 || t->tp_idx == 0) && (p->expert < 0 || t->ep_idx == s);
    if (owner && !src && (p->tag == TAG_EDP ? t->edp_idx : t->dp_idx) == 0)
        for (long j = 0; j < p->numel; j++) full[param_full_index(r, p, j)] = p->w[j];
    if (owner && src && z->sh[i].own) {   // stage 0: every DP rank holds it all, the first writes
        const Shard *sh = &z->sh[i];
        for (long j = 0; j < sh->len; j++) full[param_full_index(r, p, sh->off + j)] = src[sh->base + j];
    }
    comm_allreduce((Group *)&t->g[GROUP_STAGE], full, n, DT_F32);
    return full;
}

// pp > 1: the first rank of each later stage sends the full tensors it assembled to world rank 0
// (over their PP group, the one rank 0 is in), which then holds the whole model's list.
static StTensor *gather_stages(const Model *M, StTensor *t, int *total) {
    const Topology *tp = M->topo;
    Group *g = (Group *)&tp->g[GROUP_PP];
    if (tp->pp == 1 || tp->dp_idx || tp->tp_idx) return t;
    MPI_Request req;
    if (tp->stage > 0) {
        comm_isend(g, total, 1, DT_I32, 0, 900, &req);
        comm_wait(&req);
        for (int k = 0; k < *total; k++) {
            comm_isend(g, &t[k], sizeof t[k], DT_BYTE, 0, 901, &req);
            comm_wait(&req);
            comm_isend(g, t[k].data, t[k].shape[0] * (t[k].ndim > 1 ? t[k].shape[1] : 1), DT_F32, 0, 902, &req);
            comm_wait(&req);
        }
        return t;
    }
    for (int s = 1; s < tp->pp; s++) {
        int n;
        comm_recv(g, &n, 1, DT_I32, s, 900);
        t = ted_realloc(t, sizeof(StTensor) * (*total + n), MEM_TEMP);
        for (int k = *total; k < *total + n; k++) {
            comm_recv(g, &t[k], sizeof t[k], DT_BYTE, s, 901);
            long len = t[k].shape[0] * (t[k].ndim > 1 ? t[k].shape[1] : 1);
            t[k].data = ted_alloc(sizeof(float) * len, MEM_COMM);
            comm_recv(g, (float *)t[k].data, len, DT_F32, s, 902);
        }
        *total += n;
    }
    return t;
}

// How many versions of each tensor the world holds: one per EP rank for experts.
static int versions(const Model *M, const Param *p) { return p->expert < 0 ? 1 : M->topo->ep; }

// Writes one safetensors file of full tensors: for each kind q, the weights (src[q] NULL) or
// an Adam state (src[q] = z->m or z->v), named with suffix[q]. Collective; rank 0 writes.
// Returns rank 0's result on every rank.
static int save_tensors(const char *path, const Model *M, const Zero *z, const float *const *src,
                        const char *const *suffix, int kinds) {
    const Registry *r = &M->reg;
    int total = 0, rank0 = M->topo->rank == 0, k = 0;
    for (int i = 0; i < r->n; i++) total += r->p[i].tied_copy ? 0 : kinds * versions(M, &r->p[i]);
    StTensor *t = ted_alloc(sizeof(StTensor) * total, MEM_TEMP);
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        if (p->tied_copy) continue;   // the first stage's copy is saved
        for (int s = 0; s < versions(M, p); s++)
            for (int q = 0; q < kinds; q++, k++) {
                char name[140];
                param_name_for_expert(p, s * M->El + (p->expert - M->topo->ep_idx * M->El), name, sizeof name);
                snprintf(t[k].name, sizeof t[k].name, "%s%s", name, suffix[q]);
                t[k].ndim = p->ndim; t[k].shape[0] = p->save_rows; t[k].shape[1] = p->shape[1];
                t[k].data = assemble(M, z, i, s, src[q]);   // first save_rows rows: padding is not stored
                if (M->topo->g[GROUP_STAGE].rank) { ted_free((void *)t[k].data); t[k].data = NULL; }
            }
    }
    t = gather_stages(M, t, &total);
    int rc = rank0 ? st_write(path, t, total) : 0;
    for (k = 0; k < total; k++) ted_free((void *)t[k].data);
    ted_free(t);
    comm_broadcast((Group *)&M->topo->g[GROUP_WORLD], &rc, 1, DT_I32, 0);
    return rc;
}

// Rank 0's text files of a checkpoint in folder tmp: Hugging Face's config.json and
// generation_config.json, trainer_state.json (the step, the data position, the run's id) and run.json
static int write_texts(const char *tmp, const Model *M, const Zero *z, const TrainerState *st) {
    char path[1300], state[600], ob[96] = "", id[40] = "";
    char *cfg = hf_config_json(&M->cfg), *gen = hf_generation_config_json(&M->cfg);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    int rc = write_text(path, cfg);
    snprintf(path, sizeof path, "%s/generation_config.json", tmp);
    if (!rc) rc = write_text(path, gen);
    ted_free(gen);
    ted_free(cfg);
    if (z->onebit)   // the layout whose per-rank error files this checkpoint holds
        snprintf(ob, sizeof ob, ", \"onebit_layout\": [%d, %d, %d]", M->topo->world, M->topo->tp, M->topo->ep);
    if (savedir_current_id()[0]) snprintf(id, sizeof id, ", \"run_id\": \"%s\"", savedir_current_id());
    snprintf(state, sizeof state,
             "{\"step\": %ld, \"adam_t\": %ld, \"steps\": %ld, \"seed\": \"%llu\", \"data_order\": \"%s\", "
             "\"tokens\": %.0f, \"global_batch\": %ld%s%s}\n",
             st->step, st->adam_t, st->steps, (unsigned long long)st->seed, st->sequential ? "sequential" : "shuffled",
             st->tokens, st->gbatch, ob, id);
    snprintf(path, sizeof path, "%s/trainer_state.json", tmp);
    if (!rc) rc = write_text(path, state);
    if (!rc) rc = runinfo_write(tmp);   // the run's resolved settings (training runs)
    return rc;
}

// The whole checkpoint tmp becomes dir: an existing checkpoint of the same step (moved to old
// first) goes only once the new one is in place and synced; then the oldest beyond keep_last go
static int swap_in(const char *root, const char *dir, const char *tmp, const char *old, int keep_last) {
    savedir_rm_tree(old);
    int had = rename(dir, old) == 0;
    if (rename(tmp, dir)) {
        ted_error("%s: cannot rename into place: %s", dir, strerror(errno));
        if (had) rename(old, dir);
        return -1;
    }
    if (had) savedir_rm_tree(old);
    if (savedir_fsync(dir) || savedir_fsync(root)) {
        ted_error("%s: cannot sync: %s", dir, strerror(errno));
        return -1;
    }
    savedir_prune(root, keep_last);
    return 0;
}

int ckpt_save(const char *root, const Model *M, const Zero *z, const TrainerState *st) {
    int rank0 = M->topo->rank == 0, rc = 0;
    Group *world = (Group *)&M->topo->g[GROUP_WORLD];
    char dir[1200], tmp[1200], old[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/step_%08ld", root, st->step);
    // unique temporaries (the folder is locked; a crashed save's are removed at the next start)
    int pid = (int)getpid();   // rank 0's: every rank writes its files (1-bit Adam's errors) into the same folder
    comm_broadcast(world, &pid, 1, DT_I32, 0);
    snprintf(tmp, sizeof tmp, "%s/.step_%08ld.tmp.%d", root, st->step, pid);
    snprintf(old, sizeof old, "%s/.step_%08ld.old.%d", root, st->step, pid);
    if (rank0) {
        savedir_rm_tree(tmp);
        if (mkdir(tmp, 0777)) { ted_error("%s: cannot create: %s", tmp, strerror(errno)); rc = -1; }
    }
    comm_broadcast(world, &rc, 1, DT_I32, 0);
    if (rc) return -1;
    if (z->onebit) rc = comm_max_int(world, onebit_save(z, tmp));   // per-rank errors
    // weights: the fp32 masters when the model stores 16 bits (the truth a resume needs)
    const float *w[1] = {M->reg.half ? z->master : NULL}, *mv[2] = {z->m, z->v};
    const char *ws[1] = {""}, *mvs[2] = {".exp_avg", ".exp_avg_sq"};
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (!rc) rc = save_tensors(path, M, z, w, ws, 1);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
    if (!rc) rc = save_tensors(path, M, z, mv, mvs, 2);
    if (rank0) {
        if (!rc) rc = write_texts(tmp, M, z, st);
        if (rc) savedir_rm_tree(tmp);
        else rc = swap_in(root, dir, tmp, old, M->cfg.keep_last);
    }
    comm_broadcast(world, &rc, 1, DT_I32, 0);
    return rc;
}

int ckpt_check_root(const char *root) {
    struct stat sb;
    if (!stat(root, &sb)) {
        if (S_ISDIR(sb.st_mode)) return 0;
        ted_error("--save %s: exists and is not a directory", root);
        return -1;
    }
    char path[1200];   // as mkdir -p: the missing parents too
    snprintf(path, sizeof path, "%s", root);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int bad = mkdir(path, 0777) && errno != EEXIST;
        *p = '/';
        if (bad) { ted_error("--save %s: cannot create %.*s: %s", root, (int)(p - path), path, strerror(errno)); return -1; }
    }
    if (mkdir(root, 0777) && errno != EEXIST) { ted_error("--save %s: cannot create: %s", root, strerror(errno)); return -1; }
    return 0;
}

static float *weights_of(const Model *M, const void *ctx, int i, long *lo, long *hi);

// A stored tensor must be finite (and, for Adam's second moment, not negative): a NaN or an
// Inf loaded silently would train NaN. 0, or -1 after one line naming the tensor.
static int check_finite(const char *file, const char *name, const float *x, long n, int nonneg) {
    for (long j = 0; j < n; j++) {
        if (isfinite(x[j]) && !(nonneg && x[j] < 0)) continue;
        ted_error("%s: tensor %s holds %s%g at element %ld", file, name, isfinite(x[j]) ? "a negative second moment " : "",
                  (double)x[j], j);
        return -1;
    }
    return 0;
}

// Copies this rank's elements of each parameter from the full tensors of file f
// (name + suffix) into dst(param) — weights or Adam shards.
static int load_tensors(StFile *f, const char *file, const Model *M, const char *suffix,
                        float *(*dst)(const Model *, const void *, int, long *, long *), const void *ctx) {
    const Registry *r = &M->reg;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        char name[200];
        snprintf(name, sizeof name, "%s%s", p->name, suffix);
        int nd;
        int64_t sh[4];
        const float *src = hf_import_get(f, name, &nd, sh);
        if (!src) { ted_error("%s: tensor %s is missing", file, name); return -1; }
        long n0 = sh[0], n1 = nd > 1 ? sh[1] : 1;
        if (nd != p->ndim || n0 != p->save_rows || n1 != p->shape[1]) {
            ted_error("%s: tensor %s has shape [%ld, %ld], the model needs [%ld, %ld]", file, name, n0, n1,
                      p->save_rows, p->shape[1]);
            return -1;
        }
        long lo, hi, stored = p->save_rows * p->shape[1];
        if (check_finite(file, name, src, stored, strstr(suffix, "_sq") != NULL)) return -1;
        float *out = dst(M, ctx, i, &lo, &hi);
        for (long j = lo; j < hi; j++) {
            long fi = param_full_index(r, p, j);
            out[j - lo] = fi < stored ? src[fi] : 0.0f;    // padded vocabulary rows are zero
        }
        if (dst == weights_of && r->half)
            for (long j = lo; j < hi; j++) p->w16[j] = half_from_f32(r->half, out[j - lo]);
    }
    return 0;
}

// fp32 storage: the weights themselves; 16-bit: a scratch (ctx) that load_tensors then rounds
static float *weights_of(const Model *M, const void *ctx, int i, long *lo, long *hi) {
    *lo = 0; *hi = M->reg.p[i].numel;
    return M->reg.half ? (float *)ctx : M->reg.p[i].w;
}
static float *adam_of(const Model *M, const void *ctx, int i, long *lo, long *hi) {
    const Zero *z = ((const void **)ctx)[0];
    const float *buf = ((const void **)ctx)[1];
    *lo = z->sh[i].off; *hi = z->sh[i].off + z->sh[i].len;
    return (float *)buf + z->sh[i].base;
}

// Buffers transformers saves beside the weights, which are no tensors of the model: GPT-2's
// attention masks (h.N.attn.bias, attn.masked_bias) and rotary frequencies.
static int is_buffer(const char *name) {
    static const char *const tails[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq", NULL};
    size_t n = strlen(name);
    for (int i = 0; tails[i]; i++)
        if (n >= strlen(tails[i]) && !strcmp(name + n - strlen(tails[i]), tails[i])) return 1;
    return 0;
}

// The file's tensors the model did not read (config.json with fewer layers than the weights, a bias
// its attention does not have): a warning names them, as transformers does (world rank 0, when its
// model holds every tensor: no pipeline stages or expert ranks).
static void warn_unread(const StFile *f, const char *file) {
    char names[400] = "";
    int n = 0;
    for (int i = 0; i < st_count(f); i++) {
        if (st_read(f, i) || is_buffer(st_name(f, i))) continue;
        size_t k = strlen(names);
        if (k < sizeof names - 4) snprintf(names + k, sizeof names - k, "%s%s", n ? ", " : "", st_name(f, i));
        n++;
    }
    if (n && comm_world_rank() == 0)
        fprintf(stderr, "warning: %s: %d tensor%s the model of its config.json does not read (ignored): %s%s\n", file, n,
                n == 1 ? "" : "s", names, strlen(names) >= sizeof names - 4 ? " ..." : "");
}

int ckpt_load_weights(const char *dir, Model *M) {
    Config c = M->cfg;
    if (ckpt_read_config(dir, &c)) return -1;
    if (ckpt_check_model(dir, &c, &M->m)) return -1;
    char p[1300];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    StFile *f = st_open(p);
    if (!f) return -1;
    long big = 0;
    for (int i = 0; i < M->reg.n; i++) if (M->reg.p[i].numel > big) big = M->reg.p[i].numel;
    float *scratch = M->reg.half ? ted_alloc(sizeof(float) * big, MEM_TEMP) : NULL;
    const char *emb = cfg_is_llama(&M->m) ? "model.embed_tokens.weight" : "transformer.wte.weight";
    int tied = M->m.tie_word_embeddings;   // tied: a transformers folder's lm_head must be the embedding
    int rc = tied && hf_import_check_head(f, p, emb) ? -1 : load_tensors(f, p, M, "", weights_of, scratch);
    if (!rc && M->topo->pp == 1 && M->topo->ep == 1) warn_unread(f, p);   // a rank that holds every tensor
    ted_free(scratch);
    st_close(f);
    return rc;
}

int ckpt_load_masters(const char *dir, Model *M, Zero *z) {
    if (!M->reg.half) return 0;   // fp32: the caller copies the weights (zero_sync_master)
    char p[1300];   // the exact fp32 masters, not the 16-bit weights rounded from them
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    StFile *f = st_open(p);
    if (!f) return -1;
    const void *w_ctx[2] = {z, z->master};
    int rc = load_tensors(f, p, M, "", adam_of, w_ctx);
    st_close(f);
    return rc;
}

int ckpt_load_state(const char *dir, Model *M, Zero *z, TrainerState *st) {
    char p[1300];
    snprintf(p, sizeof p, "%s/optimizer.safetensors", dir);
    StFile *f = st_open(p);
    if (!f) return -1;
    const void *m_ctx[2] = {z, z->m}, *v_ctx[2] = {z, z->v};
    int rc = load_tensors(f, p, M, ".exp_avg", adam_of, m_ctx);
    if (!rc) rc = load_tensors(f, p, M, ".exp_avg_sq", adam_of, v_ctx);
    st_close(f);
    if (rc) return -1;
    if (ckpt_load_masters(dir, M, z)) return -1;
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    if (read_trainer_state(p, st)) return -1;
    z->t = st->adam_t;
    const int *l = st->onebit_layout;
    int same = l[0] == M->topo->world && l[1] == M->topo->tp && l[2] == M->topo->ep;
    return z->onebit ? onebit_load(z, dir, same) : 0;
}
