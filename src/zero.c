// zero.c — ZeRO-1 AdamW (see zero.h).
#include "zero.h"
#include "alloc.h"
#include "backend.h"
#include "ops.h"
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
    // the shard lives on the run's device; a GPU run keeps a host copy for checkpoints
    size_t bytes = sizeof(float) * z->total;
    z->dev[0] = z->master = ted_alloc_buf(bytes, MEM_OPTIMIZER);
    z->dev[1] = z->m = ted_alloc_buf(bytes, MEM_OPTIMIZER);
    z->dev[2] = z->v = ted_alloc_buf(bytes, MEM_OPTIMIZER);
    for (int i = 0; i < 3; i++) z->host[i] = ted_device == DEV_CPU ? z->dev[i] : ted_alloc(bytes, MEM_MIRROR);
    zero_sync_master(z);
    z->sq = ted_alloc_buf(sizeof(double) * reg->n, MEM_TEMP);
    z->sq_host = ted_alloc(sizeof(double) * reg->n, MEM_TEMP);
    z->loss_scale = reg->half == 2 ? 65536.0f : 1.0f;   // DeepSpeed's initial_scale_power 16
    z->window = 1000;
}

void zero_sync_master(Zero *z) {
    const Registry *r = z->reg;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        const Shard *s = &z->sh[i];
        if (r->half) convert_to_f32(z->master + s->base, p->w16 + s->off, s->len, r->half);
        else buf_copy(z->master + s->base, p->w + s->off, sizeof(float) * s->len);
    }
}

static void view(Zero *z, float **from, float **to, int copy) {
    for (int i = 0; i < 3; i++) if (copy) buf_copy(to[i], from[i], sizeof(float) * z->total);
    z->master = to[0]; z->m = to[1]; z->v = to[2];
}
void zero_host_view(Zero *z, int copy) { view(z, z->dev, z->host, copy); }
void zero_device_view(Zero *z, int copy) { view(z, z->host, z->dev, copy); }

void zero_free(Zero *z) {
    for (int i = 0; i < 3; i++) { if (z->host[i] != z->dev[i]) ted_free(z->host[i]); ted_free_buf(z->dev[i]); }
    ted_free(z->sh); ted_free_buf(z->comm[0]); ted_free_buf(z->comm[1]); ted_free_buf(z->tile);
    ted_free_buf(z->sq); ted_free(z->sq_host);
    memset(z, 0, sizeof *z);
}

// The optimizer's buffers, made at the first step and kept (nothing is allocated per step):
// the two communication buffers of the largest padded tensor, and the up-cast tile.
static void plan_buffers(Zero *z, long tile) {
    if (z->planned) return;
    z->planned = 1;
    size_t es = z->reg->half ? 2 : 4, big = 0, chunk = 0;
    for (int i = 0; i < z->reg->n; i++) {
        const Shard *s = &z->sh[i];
        int size = dp_of(z, &z->reg->p[i])->size;
        if (size == 1) continue;   // nothing travels
        size_t padded = (size_t)s->chunk * size;
        if (padded > big) big = padded;
        if ((size_t)s->chunk > chunk) chunk = s->chunk;
    }
    if (big) { z->comm[0] = ted_alloc_buf(es * big, MEM_COMM); z->comm[1] = ted_alloc_buf(es * chunk, MEM_COMM); }
    if (z->reg->half) z->tile = ted_alloc_buf(sizeof(float) * (tile > 0 ? tile : 1), MEM_TEMP);
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
    char *buf = z->comm[0], *mine = z->comm[1];
    char *grad = half ? (char *)p->g16 : (char *)p->g;
    buf_copy(buf, grad, es * p->numel);
    buf_zero(buf + es * p->numel, es * (padded - p->numel));
    comm_reduce_scatter(g, buf, mine, s->chunk, half == 1 ? DT_BF16 : half == 2 ? DT_F16 : DT_F32);
    buf_copy(grad + es * s->off, mine, es * s->len);
}

static void gather_param(Zero *z, Param *p, const Shard *s) {
    Group *g = dp_of(z, p);
    if (g->size == 1) return;
    size_t es = z->reg->half ? 2 : 4;   // the parameters travel in their storage format
    char *buf = z->comm[0], *mine = z->comm[1];
    char *w = z->reg->half ? (char *)p->w16 : (char *)p->w;
    buf_copy(mine, w + es * s->off, es * s->len);
    comm_allgather(g, mine, buf, s->chunk * (long)es, DT_BYTE);
    buf_copy(w, buf, es * p->numel);
}

// AdamW on n elements of a shard, given their fp32 gradients (already clipped and unscaled).
static void adam(float *w, float *m, float *v, const float *g, long n, float lr, float decay, const Config *c,
                 float bc1, float bc2) {
    float b1 = c->beta1, b2 = c->beta2;
    ON_GPU(cu_adamw(w, m, v, g, n, lr, decay, b1, b2, c->eps, bc1, bc2));
    #pragma omp parallel for simd schedule(static)
    for (long j = 0; j < n; j++) {
        m[j] = b1 * m[j] + (1 - b1) * g[j];
        v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
        float denom = sqrtf(v[j]) / sqrtf(bc2) + c->eps;
        w[j] = w[j] * decay - (lr / bc1) * m[j] / denom;
    }
}

// dst = s·f32(src): a tile of 16-bit gradients, unscaled and clipped
static void upcast(float *dst, const uint16_t *src, long n, int half, float s) {
    ON_GPU(cu_upcast_scale(dst, src, n, half, s));
    #pragma omp parallel for simd schedule(static)
    for (long j = 0; j < n; j++) dst[j] = half_to_f32(half, src[j]) * s;
}

static void scale(float *x, long n, float s) {
    ON_GPU(cu_scale(x, n, s));
    for (long j = 0; j < n; j++) x[j] *= s;
}

// *out = Σ (s·x)² over a shard, in double. out is one of z->sq's slots: on the GPU a device
// double, so that the norm of every tensor is computed without waiting, and read once.
static void sumsq(double *out, const void *x, long n, int half, float s) {
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) {
        if (half) cu_sumsq_half(out, x, n, half, s);
        else cu_sumsq(out, x, n);   // s is 1 here: fp32 gradients are unscaled
        return;
    }
#endif
    double acc = 0;
    if (half)
        for (long j = 0; j < n; j++) { double g = half_to_f32(half, ((const uint16_t *)x)[j]) * s; acc += g * g; }
    else
        for (long j = 0; j < n; j++) acc += (double)((const float *)x)[j] * ((const float *)x)[j];
    *out = acc;
}

double zero_step(Zero *z, const Config *c, float lr) {
    Registry *r = z->reg;
    int half = r->half;
    float unscale = 1.0f / z->loss_scale;
    long tile = c->tile_size > 0 && c->tile_size < z->total ? c->tile_size : z->total;
    plan_buffers(z, tile);
    // 1. reduce gradients to the shard owners; squared norm of the owned shards
    double sq = 0;
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        reduce_grad(z, p, s);
        if (half) sumsq(z->sq + i, p->g16 + s->off, s->len, half, unscale);
        else sumsq(z->sq + i, p->g + s->off, s->len, 0, 1.0f);
    }
    const double *part = buf_to_host(z->sq_host, z->sq, sizeof(double) * r->n);
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        double acc = part[i];
        // a tensor replicated over TP has the same gradient on every TP rank: count it once;
        // so is the tied wte on the first and the last pipeline stage
        if ((p->split_dim >= 0 || z->topo->tp_idx == 0) && !p->tied_copy) sq += acc;
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
    float *buf = z->tile;
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        float decay = p->decay ? 1.0f - lr * c->weight_decay : 1.0f;
        long step = half ? tile : s->len;   // fp32 gradients need no up-cast: one pass
        for (long j0 = 0; j0 < s->len; j0 += step) {
            long n = s->len - j0 < step ? s->len - j0 : step;
            float *w = z->master + s->base + j0, *g;
            if (half) {
                upcast(buf, p->g16 + s->off + j0, n, half, unscale * coef);
                g = buf;
            } else {
                g = p->g + s->off + j0;
                if (coef != 1.0f) scale(g, n, coef);
            }
            adam(w, z->m + s->base + j0, z->v + s->base + j0, g, n, lr, decay, c, bc1, bc2);
            if (half) convert_from_f32(p->w16 + s->off + j0, w, n, half);
            else buf_copy(p->w + s->off + j0, w, sizeof(float) * n);
        }
        // 3. every rank of the group gets the whole updated tensor
        gather_param(z, p, s);
    }
    return norm;
}
