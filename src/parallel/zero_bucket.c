// zero_bucket.c — ZeRO-2 gradient buckets (see zero_bucket.h).
#include "parallel/zero_bucket.h"
#include "parallel/zero_overlap.h"
#include "core/alloc.h"
#include "parallel/comm.h"
#include "nn/ops.h"
#include <string.h>

// the gradients' storage (params.h: ghalf), which the buckets and the shard hold
static size_t elem_size(const Zero *z) { return z->reg->ghalf ? 2 : 4; }
static char *grad_of(const Zero *z, const Param *p) { return z->reg->ghalf ? (char *)p->g16 : (char *)p->g; }

// A tensor's slot in a bucket: its size padded to a multiple of its group's size, so that the
// reduce-scatter reads it in place (the padding stays zero).
static long slot(const Zero *z, int i) { return z->sh[i].chunk * zero_group(z, &z->reg->p[i])->size; }

// Slot elements of each block's tensors; returns the number of blocks (highest layer + 1).
static int block_sizes(const Zero *z, long **out) {
    const Registry *r = z->reg;
    int L = 0;
    for (int i = 0; i < r->n; i++) if (r->p[i].layer + 1 > L) L = r->p[i].layer + 1;
    long *sz = ted_alloc(sizeof(long) * (L + 1), MEM_TEMP);
    for (int i = 0; i < r->n; i++) if (r->p[i].layer >= 0) sz[r->p[i].layer] += slot(z, i);
    *out = sz;
    return L;
}

// This rank's reduced part of one tensor, and (16-bit) its up-cast: the largest chunk.
static void size_comm(Zero *z) {
    long chunk = 1;
    for (int i = 0; i < z->reg->n; i++) if (z->sh[i].chunk > chunk) chunk = z->sh[i].chunk;
    z->recv = ted_alloc_buf(elem_size(z) * chunk, MEM_COMM);
    if (z->reg->ghalf) z->acc = ted_alloc_buf(sizeof(float) * chunk, MEM_COMM);
}

// Packs the blocks (lsz[l] slot elements each) into buckets of at least bucket_size: bucket 0 is
// the deferred region; blocks fill buckets 1, 2, … from the last block down. Each block's
// bucket and offset in it (when lbk, loff are given); returns the largest bucket's fill.
static long pack_blocks(const long *lsz, int L, long bucket_size, int *lbk, long *loff, int *nbk) {
    long big = 0;
    for (int l = 0; l < L; l++) if (lsz[l] > big) big = lsz[l];
    long cap = bucket_size > big ? bucket_size : big;   // whole blocks: never less than the largest
    long cur = cap, used = 0;
    *nbk = 1;
    for (int l = L - 1; l >= 0; l--) {
        if (!lsz[l]) continue;
        if (cur + lsz[l] > cap) { (*nbk)++; cur = 0; }
        if (lbk) { lbk[l] = *nbk - 1; loff[l] = cur; }
        cur += lsz[l];
        if (cur > used) used = cur;
    }
    return used;
}

long bucket_elems_of(const Registry *r, int dp, int edp, long bucket_size, int overlap) {
    int L = 0;
    for (int i = 0; i < r->n; i++) if (r->p[i].layer + 1 > L) L = r->p[i].layer + 1;
    long *lsz = ted_alloc(sizeof(long) * (L + 1), MEM_TEMP), deferred = 0;
    for (int i = 0; i < r->n; i++) {
        long n = r->p[i].tag == TAG_EDP ? edp : dp, slot = (r->p[i].numel + n - 1) / n * n;
        if (r->p[i].layer >= 0) lsz[r->p[i].layer] += slot;
        else deferred += slot;
    }
    int nbk;
    long used = pack_blocks(lsz, L, bucket_size, NULL, NULL, &nbk);
    ted_free(lsz);
    return deferred + used + (overlap && nbk > 2 ? used : 0);   // overlap: a second half
}

void bucket_plan(Zero *z, long bucket_size, int overlap) {
    Registry *r = z->reg;
    long *lsz;
    int L = block_sizes(z, &lsz);
    long *loff = ted_alloc(sizeof(long) * (L + 1), MEM_TEMP);
    int *lbk = ted_alloc(sizeof(int) * (L + 1), MEM_TEMP), nbk;
    long used = pack_blocks(lsz, L, bucket_size, lbk, loff, &nbk);
    z->deferred_elems = 0;
    for (int i = 0; i < r->n; i++) if (r->p[i].layer < 0) z->deferred_elems += slot(z, i);
    long half = overlap && nbk > 2 ? used : 0;   // overlap: the second half's offset
    z->bucket_elems = z->deferred_elems + used + half;
    size_t es = elem_size(z);
    z->bucket = ted_alloc_buf(es * (z->bucket_elems ? z->bucket_elems : 1), MEM_GRADS);
    z->gshard = ted_alloc_buf(es * (z->total ? z->total : 1), MEM_GRADS);
    z->nbk = nbk;
    z->bk_of = ted_alloc(sizeof(int) * r->n, MEM_TEMP);
    z->bk_need = ted_alloc(sizeof(int) * nbk, MEM_TEMP);
    z->bk_ready = ted_alloc(sizeof(int) * nbk, MEM_TEMP);
    long def = 0;
    for (int i = 0; i < r->n; i++) {   // the gradient views: each tensor's place in its bucket
        Param *p = &r->p[i];
        long at;
        if (p->layer < 0) { at = def; def += slot(z, i); z->bk_of[i] = 0; }
        else {
            z->bk_of[i] = lbk[p->layer];
            at = z->deferred_elems + ((z->bk_of[i] - 1) & 1) * half + loff[p->layer];
            loff[p->layer] += slot(z, i);
        }
        if (r->ghalf) p->g16 = (uint16_t *)z->bucket + at;
        else p->g = (float *)z->bucket + at;
        z->bk_need[z->bk_of[i]]++;
    }
    ted_free(lsz); ted_free(loff); ted_free(lbk);
    size_comm(z);
    r->grads_ready = bucket_ready;
    r->grads_ctx = z;
}

void bucket_free(Zero *z) {
    if (z->reg) { z->reg->grads_ready = NULL; z->reg->grads_ctx = NULL; }
    ted_free_buf(z->bucket); ted_free_buf(z->gshard); ted_free_buf(z->recv);
    ted_free_buf(z->acc); ted_free(z->bk_of); ted_free(z->bk_need); ted_free(z->bk_ready);
}

static DType dtype_of(const Zero *z) { return comm_dtype(z->reg->ghalf); }

// This rank's reduced part of tensor i added into the shard's gradients, and its slot zeroed.
static void add_part(Zero *z, int i, const void *part) {
    const Registry *r = z->reg;
    const Param *p = &r->p[i];
    const Shard *s = &z->sh[i];
    if (r->ghalf) {
        convert_to_f32(z->acc, part, s->len, r->ghalf);
        accumulate_half((uint16_t *)z->gshard + s->base, z->acc, s->len, r->ghalf);
    } else {
        float *dst = (float *)z->gshard + s->base;
        residual_forward(dst, dst, part, s->len);
    }
    buf_zero(grad_of(z, p), elem_size(z) * p->numel);
}

// Each tensor of bucket b reduce-scattered over its group from its padded slot, this rank's
// part added into the shard's gradients, and the slot zeroed for the next bucket.
static void reduce_bucket(Zero *z, int b) {
    const Registry *r = z->reg;
    for (int i = 0; i < r->n; i++) {
        if (z->bk_of[i] != b) continue;
        comm_reduce_scatter(zero_group(z, &r->p[i]), grad_of(z, &r->p[i]), z->recv, z->sh[i].chunk, dtype_of(z));
        add_part(z, i, z->recv);
    }
}

// overlap: the same reduce-scatters, non-blocking, each into its own region.
static void bucket_start(Zero *z, int b) {
    const Registry *r = z->reg;
    ZeroOverlap *o = z->ov;
    for (int i = 0; i < r->n; i++)
        if (z->bk_of[i] == b && o->roff[i] >= 0)
            comm_ireduce_scatter(zero_group(z, &r->p[i]), grad_of(z, &r->p[i]), o->rbuf + o->roff[i], z->sh[i].chunk,
                                 dtype_of(z), &o->red[i]);
    o->bk_fly[b] = 1;
}

static void bucket_wait(Zero *z, int b) {
    ZeroOverlap *o = z->ov;
    if (!o->bk_fly[b]) return;
    for (int i = 0; i < z->reg->n; i++) {
        if (z->bk_of[i] != b) continue;
        comm_req_wait(&o->red[i]);   // a group of one: the slot is this rank's part
        add_part(z, i, o->roff[i] >= 0 ? o->rbuf + o->roff[i] : grad_of(z, &z->reg->p[i]));
    }
    o->bk_fly[b] = 0;
}

void bucket_wait_all(Zero *z) { for (int b = 0; b < z->nbk; b++) bucket_wait(z, b); }

// overlap: bucket b is complete. The next bucket writes into b − 1's half; after the deferred
// region (the micro-batch's end) the next micro-batch writes everywhere.
static void bucket_overlap(Zero *z, int b) {
    bucket_start(z, b);
    if (b > 1) bucket_wait(z, b - 1);
    if (b == 0 && ++z->ov->mb < z->ov->accum) bucket_wait_all(z);
}

void bucket_ready(void *zero, int i0, int i1) {
    Zero *z = zero;
    for (int i = i0; i < i1; i++) {
        int b = z->bk_of[i];
        if (++z->bk_ready[b] < z->bk_need[b]) continue;
        z->bk_ready[b] = 0;
        if (z->ov) bucket_overlap(z, b);
        else reduce_bucket(z, b);
    }
    if (z->ov) comm_progress();
}
