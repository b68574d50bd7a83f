// params.c — the parameter registry (see params.h).
#include "nn/params.h"
#include "core/alloc.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/util.h"
#include <string.h>

void reg_init(Registry *r, int cap, int tp, int tp_idx) {
    memset(r, 0, sizeof *r);
    r->p = ted_alloc(sizeof(Param) * cap, MEM_TEMP);
    r->cap = cap; r->tp = tp; r->tp_idx = tp_idx;
}

int reg_add(Registry *r, const char *name, int ndim, long d0, long d1, int split_dim, int parts,
            SyncTag tag, float std, float val) {
    CHECK(r->n < r->cap, "parameter registry full (%d) adding %s", r->cap, name);
    Param *p = &r->p[r->n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0; p->shape[1] = ndim > 1 ? d1 : 1;
    p->save_rows = d0;
    p->split_dim = r->tp > 1 ? split_dim : -1;
    p->split_parts = parts > 0 ? parts : 1;
    p->lshape[0] = p->shape[0]; p->lshape[1] = p->shape[1];
    if (p->split_dim >= 0) {
        CHECK(p->shape[p->split_dim] % (p->split_parts * r->tp) == 0, "%s: dim %d not divisible by tp",
              name, p->split_dim);
        p->lshape[p->split_dim] /= r->tp;
    }
    p->numel = p->lshape[0] * p->lshape[1];
    p->tag = tag;
    p->decay = ndim >= 2;
    p->expert = -1;
    int layer, e, used = 0;
    p->layer = sscanf(name, "transformer.h.%d.", &layer) == 1 || sscanf(name, "model.layers.%d.", &layer) == 1 ? layer : -1;
    const char *ex = strstr(name, ".experts.");   // gpt2's "….mlp.experts.{e}.", llama's "….block_sparse_moe.experts.{e}."
    if (p->layer >= 0 && ex && sscanf(ex, ".experts.%d.%n", &e, &used) == 1 && used > 0) {
        p->expert = e;
        snprintf(p->suffix, sizeof p->suffix, "%s", ex + used);
    }
    p->init_std = std; p->init_val = val;
    p->off = (size_t)r->total;
    r->total += p->numel;
    return r->n++;
}

// Points every Param at the run buffers (device 1) or at the host mirror of the weights
// (device 0; the gradient views stay on the run buffers).
static void point(Registry *r, int device) {
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        if (r->half) p->w16 = (device ? r->w16 : r->host_w16) + p->off;
        else p->w = (device ? r->w : r->host_w) + p->off;
        if (r->g16) p->g16 = r->g16 + p->off;   // external gradients keep their views
        if (r->g) p->g = r->g + p->off;
    }
}

void reg_alloc(Registry *r, Precision half, Precision ghalf) {
    r->half = half; r->ghalf = ghalf;
    size_t es = half ? sizeof(uint16_t) : sizeof(float), gs = ghalf ? sizeof(uint16_t) : sizeof(float);
    void *w = ted_alloc_buf(es * r->total, MEM_PARAMS);
    void *g = r->grads_external ? NULL : ted_alloc_buf(gs * r->total, MEM_GRADS);
    // a GPU run keeps a host copy of the weights for initialisation and checkpoints
    void *host = ted_device == DEV_CPU ? w : ted_alloc(es * r->total, MEM_MIRROR);
    if (half) { r->w16 = w; r->host_w16 = host; }
    else { r->w = w; r->host_w = host; }
    if (ghalf) r->g16 = g;
    else r->g = g;
    point(r, 1);
}

void reg_host_view(Registry *r, int copy) {
    size_t es = r->half ? sizeof(uint16_t) : sizeof(float);
    if (copy) buf_copy(r->half ? (void *)r->host_w16 : (void *)r->host_w, r->half ? (void *)r->w16 : (void *)r->w,
                       es * r->total);
    point(r, 0);
}

void reg_device_view(Registry *r, int copy) {
    size_t es = r->half ? sizeof(uint16_t) : sizeof(float);
    if (copy) buf_copy(r->half ? (void *)r->w16 : (void *)r->w, r->half ? (void *)r->host_w16 : (void *)r->host_w,
                       es * r->total);
    point(r, 1);
}

long param_full_index(const Registry *r, const Param *p, long i) {
    if (p->split_dim < 0) return i;
    long row = i / p->lshape[1], col = i % p->lshape[1];
    long *x = p->split_dim == 0 ? &row : &col;
    long block = p->shape[p->split_dim] / p->split_parts;     // one of q|k|v
    long lblock = block / r->tp;                               // this rank's piece of it
    long part = *x / lblock, within = *x % lblock;
    *x = part * block + r->tp_idx * lblock + within;
    return row * p->shape[1] + col;
}

void reg_init_weights(Registry *r, uint64_t seed) {
    for (int k = 0; k < r->n; k++) {
        Param *p = &r->p[k];
        uint64_t stream = rng_hash_str(p->name);
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < p->numel; i++) {
            float v = p->init_std > 0 ? p->init_std * rng_normal(seed, stream, (uint64_t)param_full_index(r, p, i))
                                      : p->init_val;
            if (r->half) p->w16[i] = half_from_f32(r->half, v);
            else p->w[i] = v;
        }
    }
}

int reg_find(const Registry *r, const char *name) {
    for (int i = 0; i < r->n; i++) if (!strcmp(r->p[i].name, name)) return i;
    return -1;
}

void param_name_for_expert(const Param *p, int e, char *out, size_t len) {
    if (p->expert < 0) snprintf(out, len, "%s", p->name);
    else {   // the name up to and with ".experts.", then e and the suffix
        int at = (int)(strstr(p->name, ".experts.") - p->name) + 9;
        snprintf(out, len, "%.*s%d.%s", at, p->name, e, p->suffix);
    }
}

void reg_free(Registry *r) {
    if (r->host_w != r->w) ted_free(r->host_w);
    if (r->host_w16 != r->w16) ted_free(r->host_w16);
    ted_free_buf(r->w); ted_free_buf(r->g); ted_free_buf(r->w16); ted_free_buf(r->g16); ted_free(r->p);
    memset(r, 0, sizeof *r);
}
