// zero_overlap.c — zero_optimization.overlap_comm (see zero_overlap.h).
#include "parallel/zero_overlap.h"
#include "core/alloc.h"
#include "core/util.h"
#include <string.h>

// weights travel in their storage format, gradients in theirs (params.h: half, ghalf)
static size_t esize(const Zero *z) { return z->reg->half ? 2 : 4; }
static size_t gsize(const Zero *z) { return z->reg->ghalf ? 2 : 4; }
static DType dtype(const Zero *z) { return comm_dtype(z->reg->ghalf); }
static char *grad(const Zero *z, const Param *p) { return z->reg->ghalf ? (char *)p->g16 : (char *)p->g; }
static char *weight(const Zero *z, const Param *p) { return z->reg->half ? (char *)p->w16 : (char *)p->w; }
static int travels(const Zero *z, int i) { return zero_group(z, &z->reg->p[i])->size > 1; }
// A block's tensor (layer >= 0): the ones whose reduction starts during the backward.
static int in_block(const Zero *z, int i) { return z->reg->p[i].layer >= 0; }

static void gradient_hook(void *zero, int i0, int i1);
static void weights_hook(void *zero, int i0, int i1) { overlap_params_wait(zero, i0, i1); comm_progress(); }

// The byte regions of each travelling tensor: reductions (stage 1: padded send + chunk; stage 2:
// chunk) and the staged gathers of tensors whose size is not chunk x group size.
static void plan_regions(Zero *z, ZeroOverlap *o) {
    const Registry *r = z->reg;
    size_t es = esize(z), gs = gsize(z);
    long rb = 0, gb = 0;
    for (int i = 0; i < r->n; i++) {
        const Shard *s = &z->sh[i];
        long padded = s->chunk * zero_group(z, &r->p[i])->size;
        o->roff[i] = o->goff[i] = -1;
        if (!travels(z, i)) continue;
        if (z->stage == 1) { o->roff[i] = rb; rb += gs * (padded + s->chunk); }
        if (z->stage == 2) { o->roff[i] = rb; rb += gs * s->chunk; }
        if (z->stage > 0 && padded != r->p[i].numel) { o->goff[i] = gb; gb += es * (padded + s->chunk); }
    }
    o->rbuf = rb ? ted_alloc_buf(rb, MEM_COMM) : NULL;
    o->gbuf = gb ? ted_alloc_buf(gb, MEM_COMM) : NULL;
}

void overlap_init(Zero *z, int grad_accum) {
    Registry *r = z->reg;
    ZeroOverlap *o = ted_alloc(sizeof(ZeroOverlap), MEM_TEMP);
    memset(o, 0, sizeof *o);
    z->ov = o;
    o->accum = grad_accum;
    o->red = ted_alloc(sizeof(CommReq) * r->n, MEM_TEMP);
    o->gat = ted_alloc(sizeof(CommReq) * r->n, MEM_TEMP);
    for (int i = 0; i < r->n; i++) o->red[i].req = o->gat[i].req = MPI_REQUEST_NULL;
    o->seen = ted_alloc(sizeof(int) * r->n, MEM_TEMP);
    memset(o->seen, 0, sizeof(int) * r->n);
    o->roff = ted_alloc(sizeof(long) * r->n, MEM_TEMP);
    o->goff = ted_alloc(sizeof(long) * r->n, MEM_TEMP);
    o->bk_fly = ted_alloc(sizeof(int) * (z->nbk > 0 ? z->nbk : 1), MEM_TEMP);
    memset(o->bk_fly, 0, sizeof(int) * (z->nbk > 0 ? z->nbk : 1));
    plan_regions(z, o);
    if (z->stage < 2) { r->grads_ready = gradient_hook; r->grads_ctx = z; }
    r->weights_needed = weights_hook;
    r->weights_ctx = z;
}

void overlap_free(Zero *z) {
    ZeroOverlap *o = z->ov;
    if (!o) return;
    for (int i = 0; i < z->reg->n; i++) { comm_req_wait(&o->red[i]); comm_req_wait(&o->gat[i]); }
    Registry *r = z->reg;
    if (r->grads_ready == gradient_hook) { r->grads_ready = NULL; r->grads_ctx = NULL; }
    r->weights_needed = NULL; r->weights_ctx = NULL;
    ted_free(o->red); ted_free(o->gat); ted_free(o->seen); ted_free(o->roff); ted_free(o->goff);
    ted_free(o->bk_fly); ted_free_buf(o->rbuf); ted_free_buf(o->gbuf); ted_free(o);
    z->ov = NULL;
}

// Stages 0, 1: tensor i's reduction, as zero.c's reduce_grad does it blocking: stage 0 all-reduces
// the gradient in place; stage 1 reduce-scatters a zero-padded copy.
static void reduce_start(Zero *z, int i) {
    ZeroOverlap *o = z->ov;
    Param *p = &z->reg->p[i];
    Group *g = zero_group(z, p);
    if (z->stage == 0) { comm_iallreduce(g, grad(z, p), p->numel, dtype(z), &o->red[i]); return; }
    size_t es = gsize(z);
    long padded = z->sh[i].chunk * g->size;
    char *send = o->rbuf + o->roff[i];
    buf_copy(send, grad(z, p), es * p->numel);
    buf_zero(send + es * p->numel, es * (padded - p->numel));
    comm_ireduce_scatter(g, send, send + es * padded, z->sh[i].chunk, dtype(z), &o->red[i]);
}

// Stage 1: this rank's reduced chunk back into its shard of the gradient.
static void reduce_finish(Zero *z, int i) {
    ZeroOverlap *o = z->ov;
    comm_req_wait(&o->red[i]);
    if (z->stage != 1) return;
    const Param *p = &z->reg->p[i];
    const Shard *s = &z->sh[i];
    size_t es = gsize(z);
    long padded = s->chunk * zero_group(z, p)->size;
    buf_copy(grad(z, p) + es * s->off, o->rbuf + o->roff[i] + es * padded, es * s->len);
}

// The backward's hook (stages 0, 1): the last micro-batch's call for a block tensor starts its reduction.
static void gradient_hook(void *zero, int i0, int i1) {
    Zero *z = zero;
    ZeroOverlap *o = z->ov;
    for (int i = i0; i < i1; i++)
        if (in_block(z, i) && travels(z, i) && ++o->seen[i] == o->accum) reduce_start(z, i);
    comm_progress();
}

void overlap_reduce_wait(Zero *z) {
    ZeroOverlap *o = z->ov;
    for (int i = 0; i < z->reg->n; i++) {
        if (!travels(z, i)) continue;
        CHECK(o->seen[i] <= o->accum, "overlap_comm: the backward finished %s %d times in a step of %d micro-batches",
              z->reg->p[i].name, o->seen[i], o->accum);
        if (!in_block(z, i) || o->seen[i] < o->accum) reduce_start(z, i);   // outside the blocks: now
        reduce_finish(z, i);
        o->seen[i] = 0;
    }
}

void overlap_gather(Zero *z, int i) {
    ZeroOverlap *o = z->ov;
    const Param *p = &z->reg->p[i];
    const Shard *s = &z->sh[i];
    Group *g = zero_group(z, p);
    if (g->size == 1 || z->stage == 0) return;
    size_t es = esize(z);
    char *w = weight(z, p);
    if (o->goff[i] < 0) {   // chunk x size = numel: each rank's chunk sits at its place in the weights
        comm_iallgather(g, w + es * s->off, w, s->chunk * (long)es, DT_BYTE, &o->gat[i]);
        return;
    }
    char *send = o->gbuf + o->goff[i], *recv = send + es * s->chunk;
    buf_copy(send, w + es * s->off, es * s->len);
    buf_zero(send + es * s->len, es * (s->chunk - s->len));
    comm_iallgather(g, send, recv, s->chunk * (long)es, DT_BYTE, &o->gat[i]);
}

void overlap_params_wait(Zero *z, int i0, int i1) {
    ZeroOverlap *o = z->ov;
    for (int i = i0; i < i1; i++) {
        if (o->gat[i].req == MPI_REQUEST_NULL) continue;
        comm_req_wait(&o->gat[i]);
        if (o->goff[i] < 0) continue;
        const Param *p = &z->reg->p[i];
        size_t es = esize(z);
        buf_copy(weight(z, p), o->gbuf + o->goff[i] + es * z->sh[i].chunk, es * p->numel);
    }
}

void overlap_params_wait_all(Zero *z) { if (z->ov) overlap_params_wait(z, 0, z->reg->n); }
