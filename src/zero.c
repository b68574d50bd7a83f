// zero.c — ZeRO-1 AdamW (see zero.h).
#include "zero.h"
#include "alloc.h"
#include "comm.h"
#include "half.h"
#include <math.h>
#include <string.h>

static Group *dp_of(const Zero *z, const Param *p) {
    return (Group *)&z->topo->g[p->tag == TAG_EDP ? GROUP_EDP : GROUP_DP];
}

void zero_init(Zero *z, Registry *reg, const Topology *topo) {
    memset(z, 0, sizeof *z);
    z->reg = reg; z->topo = topo;
    z->sh = ted_alloc(sizeof(Shard) * reg->n, MEM_TEMP);
    for (int i = 0; i < reg->n; i++) {
        const Param *p = &reg->p[i];
        Group *g = dp_of(z, p);
        Shard *s = &z->sh[i];
        s->chunk = (p->numel + g->size - 1) / g->size;
        s->off = s->chunk * g->rank;
        s->len = p->numel - s->off < s->chunk ? p->numel - s->off : s->chunk;
        if (s->len < 0) s->len = 0;
        s->base = z->total;
        z->total += s->len;
    }
    z->master = ted_alloc(sizeof(float) * z->total, MEM_OPTIMIZER);
    z->m = ted_alloc(sizeof(float) * z->total, MEM_OPTIMIZER);
    z->v = ted_alloc(sizeof(float) * z->total, MEM_OPTIMIZER);
    zero_sync_master(z);
    z->loss_scale = reg->half == 2 ? 65536.0f : 1.0f;   // DeepSpeed's initial_scale_power 16
    z->window = 1000;
}

void zero_sync_master(Zero *z) {
    const Registry *r = z->reg;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        const Shard *s = &z->sh[i];
        for (long j = 0; j < s->len; j++)
            z->master[s->base + j] = r->half ? half_to_f32(r->half, p->w16[s->off + j]) : p->w[s->off + j];
    }
}

void zero_free(Zero *z) {
    ted_free(z->sh); ted_free(z->master); ted_free(z->m); ted_free(z->v);
    memset(z, 0, sizeof *z);
}

float lr_at(const Config *c, long s) {
    if (s < c->warmup) return c->lr * (float)(s + 1) / (float)c->warmup;
    long span = c->steps - c->warmup;
    double frac = span > 0 ? (double)(s - c->warmup) / (double)span : 1.0;
    if (frac > 1) frac = 1;
    return (float)(c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * frac)));
}

// Sum the gradient over the DP group into the owner's shard (in place at p->g + off). Each
// rank's loss gradient is already scaled by 1/(tokens of the whole step), so the sum is the
// single-process gradient.
// (16-bit storage: the gradients travel in 16 bits, each addition done in fp32.)
static void reduce_grad(Zero *z, Param *p, const Shard *s) {
    Group *g = dp_of(z, p);
    int half = z->reg->half;
    if (g->size == 1) return;
    // reduce-scatter needs equal chunks: pad the tensor to chunk·size
    size_t es = half ? 2 : 4;
    long padded = s->chunk * g->size;
    char *buf = ted_alloc(es * padded, MEM_COMM), *mine = ted_alloc(es * s->chunk, MEM_COMM);
    char *grad = half ? (char *)p->g16 : (char *)p->g;
    memcpy(buf, grad, es * p->numel);
    comm_reduce_scatter(g, buf, mine, s->chunk, half == 1 ? DT_BF16 : half == 2 ? DT_F16 : DT_F32);
    memcpy(grad + es * s->off, mine, es * s->len);
    ted_free(buf); ted_free(mine);
}

static void gather_param(Zero *z, Param *p, const Shard *s) {
    Group *g = dp_of(z, p);
    if (g->size == 1) return;
    size_t es = z->reg->half ? 2 : 4;   // the parameters travel in their storage format
    long padded = s->chunk * g->size;
    char *buf = ted_alloc(es * padded, MEM_COMM), *mine = ted_alloc(es * s->chunk, MEM_COMM);
    char *w = z->reg->half ? (char *)p->w16 : (char *)p->w;
    memcpy(mine, w + es * s->off, es * s->len);
    comm_allgather(g, mine, buf, s->chunk * (long)es, DT_BYTE);
    memcpy(w, buf, es * p->numel);
    ted_free(buf); ted_free(mine);
}

// AdamW on n elements of a shard, given their fp32 gradients (already clipped and unscaled).
static void adam(float *w, float *m, float *v, const float *g, long n, float lr, float decay, const Config *c,
                 float bc1, float bc2) {
    float b1 = c->beta1, b2 = c->beta2;
    #pragma omp parallel for simd schedule(static)
    for (long j = 0; j < n; j++) {
        m[j] = b1 * m[j] + (1 - b1) * g[j];
        v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
        float denom = sqrtf(v[j]) / sqrtf(bc2) + c->eps;
        w[j] = w[j] * decay - (lr / bc1) * m[j] / denom;
    }
}

double zero_step(Zero *z, const Config *c, float lr) {
    Registry *r = z->reg;
    int half = r->half;
    float unscale = 1.0f / z->loss_scale;
    // 1. reduce gradients to the shard owners; squared norm of the owned shards
    double sq = 0;
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        reduce_grad(z, p, s);
        double acc = 0;
        if (half)
            for (long j = 0; j < s->len; j++) { double g = half_to_f32(half, p->g16[s->off + j]) * unscale; acc += g * g; }
        else
            for (long j = 0; j < s->len; j++) acc += (double)p->g[s->off + j] * p->g[s->off + j];
        // a tensor replicated over TP has the same gradient on every TP rank: count it once
        if (p->split_dim >= 0 || z->topo->tp_idx == 0) sq += acc;
    }
    comm_allreduce((Group *)&z->topo->g[GROUP_WORLD], &sq, 1, DT_F64);
    double norm = sqrt(sq);
    // fp16 overflow (an inf or nan anywhere makes the norm one): skip the step, lower the scale
    z->skipped = !isfinite(norm);
    if (z->skipped) {
        z->loss_scale = z->loss_scale > 2.0f ? z->loss_scale / 2 : 1.0f;
        z->clean = 0;
        return norm;
    }
    if (half == 2 && ++z->clean >= z->window) { z->loss_scale *= 2; z->clean = 0; }
    float coef = 1.0f;
    if (c->clip > 0 && norm > c->clip) coef = (float)(c->clip / (norm + 1e-6));
    // 2. AdamW on the shard. 16-bit gradients are up-cast tile by tile into one fp32 buffer.
    z->t++;
    float bc1 = 1.0f - powf(c->beta1, (float)z->t), bc2 = 1.0f - powf(c->beta2, (float)z->t);
    long tile = c->tile_size > 0 && c->tile_size < z->total ? c->tile_size : z->total;
    float *buf = half ? ted_alloc(sizeof(float) * (tile > 0 ? tile : 1), MEM_TEMP) : NULL;
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        float decay = p->decay ? 1.0f - lr * c->weight_decay : 1.0f;
        long step = half ? tile : s->len;   // fp32 gradients need no up-cast: one pass
        for (long j0 = 0; j0 < s->len; j0 += step) {
            long n = s->len - j0 < step ? s->len - j0 : step;
            float *w = z->master + s->base + j0, *g;
            if (half) {
                const uint16_t *g16 = p->g16 + s->off + j0;
                #pragma omp parallel for simd schedule(static)
                for (long j = 0; j < n; j++) buf[j] = half_to_f32(half, g16[j]) * unscale * coef;
                g = buf;
            } else {
                g = p->g + s->off + j0;
                if (coef != 1.0f)
                    for (long j = 0; j < n; j++) g[j] *= coef;
            }
            adam(w, z->m + s->base + j0, z->v + s->base + j0, g, n, lr, decay, c, bc1, bc2);
            if (half)
                for (long j = 0; j < n; j++) p->w16[s->off + j0 + j] = half_from_f32(half, w[j]);
            else memcpy(p->w + s->off + j0, w, sizeof(float) * n);
        }
        // 3. every rank of the group gets the whole updated tensor
        gather_param(z, p, s);
    }
    ted_free(buf);
    return norm;
}
