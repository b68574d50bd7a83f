// zero.c — ZeRO-1 AdamW (see zero.h).
#include "zero.h"
#include "alloc.h"
#include "comm.h"
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
    for (int i = 0; i < reg->n; i++)
        memcpy(z->master + z->sh[i].base, reg->p[i].w + z->sh[i].off, sizeof(float) * z->sh[i].len);
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
static void reduce_grad(Zero *z, Param *p, const Shard *s) {
    Group *g = dp_of(z, p);
    if (g->size == 1) return;
    // reduce-scatter needs equal chunks: pad the tensor to chunk·size
    long padded = s->chunk * g->size;
    float *buf = ted_alloc(sizeof(float) * padded, MEM_COMM);
    memcpy(buf, p->g, sizeof(float) * p->numel);
    float *mine = ted_alloc(sizeof(float) * s->chunk, MEM_COMM);
    comm_reduce_scatter(g, buf, mine, s->chunk, DT_F32);
    memcpy(p->g + s->off, mine, sizeof(float) * s->len);
    ted_free(buf); ted_free(mine);
}

static void gather_param(Zero *z, Param *p, const Shard *s) {
    Group *g = dp_of(z, p);
    if (g->size == 1) return;
    long padded = s->chunk * g->size;
    float *buf = ted_alloc(sizeof(float) * padded, MEM_COMM);
    float *mine = ted_alloc(sizeof(float) * s->chunk, MEM_COMM);
    memcpy(mine, p->w + s->off, sizeof(float) * s->len);
    comm_allgather(g, mine, buf, s->chunk, DT_F32);
    memcpy(p->w, buf, sizeof(float) * p->numel);
    ted_free(buf); ted_free(mine);
}

double zero_step(Zero *z, const Config *c, float lr) {
    Registry *r = z->reg;
    // 1. reduce gradients to the shard owners; squared norm of the owned shards
    double sq = 0;
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        reduce_grad(z, p, s);
        const float *gr = p->g + s->off;
        double acc = 0;
        for (long j = 0; j < s->len; j++) acc += (double)gr[j] * gr[j];
        // a tensor replicated over TP has the same gradient on every TP rank: count it once
        if (p->split_dim >= 0 || z->topo->tp_idx == 0) sq += acc;
    }
    comm_allreduce((Group *)&z->topo->g[GROUP_WORLD], &sq, 1, DT_F64);
    double norm = sqrt(sq);
    float coef = 1.0f;
    if (c->clip > 0 && norm > c->clip) coef = (float)(c->clip / (norm + 1e-6));
    // 2. AdamW on the shard
    z->t++;
    float b1 = c->beta1, b2 = c->beta2;
    float bc1 = 1.0f - powf(b1, (float)z->t), bc2 = 1.0f - powf(b2, (float)z->t);
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        float *gr = p->g + s->off, *w = z->master + s->base, *m = z->m + s->base, *v = z->v + s->base;
        float decay = p->decay ? 1.0f - lr * c->weight_decay : 1.0f;
        #pragma omp parallel for simd schedule(static)
        for (long j = 0; j < s->len; j++) {
            float g = gr[j] * coef;
            m[j] = b1 * m[j] + (1 - b1) * g;
            v[j] = b2 * v[j] + (1 - b2) * g * g;
            float denom = sqrtf(v[j]) / sqrtf(bc2) + c->eps;
            w[j] = w[j] * decay - (lr / bc1) * m[j] / denom;
        }
        memcpy(p->w + s->off, w, sizeof(float) * s->len);
        // 3. every rank of the group gets the whole updated tensor
        gather_param(z, p, s);
    }
    return norm;
}
