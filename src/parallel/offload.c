// offload.c — ZeRO-Offload (see offload.h).
#include "parallel/offload.h"
#include "core/alloc.h"
#include "core/half.h"
#include <stdio.h>

// bytes of a weight and of a gradient (params.h: half, ghalf)
static size_t elem_size(const Zero *z) { return z->reg->half ? 2 : 4; }
static size_t grad_size(const Zero *z) { return z->reg->ghalf ? 2 : 4; }

int offload_init(Zero *z, const Config *c) {
    if (!c->offload) return 0;
    if (ted_device != DEV_CUDA) {
        if (z->topo->rank == 0)
            printf("note: zero_optimization.offload_optimizer.device \"cpu\" changes nothing on a CPU run "
                   "(the optimizer state and step are on the host already)\n");
        return 0;
    }
    z->offload = 1;
    size_t bytes = sizeof(float) * (z->total ? z->total : 1);
    for (int i = 0; i < 3; i++) z->dev[i] = z->host[i] = ted_alloc(bytes, MEM_OPTIMIZER);
    z->master = z->dev[0]; z->m = z->dev[1]; z->v = z->dev[2];
    z->stage_n = c->tile_size > 0 && c->tile_size < z->total ? c->tile_size : (z->total ? z->total : 1);
    z->gstage = ted_alloc(grad_size(z) * z->stage_n, MEM_COMM);
    z->wstage = ted_alloc(elem_size(z) * z->stage_n, MEM_COMM);
    return 1;
}

void offload_free(Zero *z) {
    ted_free(z->gstage); ted_free(z->wstage);
}

void offload_sync_master(Zero *z) {
    const Registry *r = z->reg;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        const Shard *s = &z->sh[i];
        for (long j0 = 0; j0 < s->len; j0 += z->stage_n) {
            long n = s->len - j0 < z->stage_n ? s->len - j0 : z->stage_n;
            float *w = z->master + s->base + j0;
            if (r->half) {
                buf_copy(z->wstage, p->w16 + s->off + j0, 2 * n);
                const uint16_t *h = z->wstage;
                for (long j = 0; j < n; j++) w[j] = half_to_f32(r->half, h[j]);
            } else buf_copy(w, p->w + s->off + j0, sizeof(float) * n);
        }
    }
}

void offload_step(Zero *z, int i, void *gdev, const AdamHyper *a, float gscale) {
    const Registry *r = z->reg;
    const Param *p = &r->p[i];
    const Shard *s = &z->sh[i];
    size_t es = elem_size(z), gs = grad_size(z);
    char *wdev = r->half ? (char *)(p->w16 + s->off) : (char *)(p->w + s->off);
    for (long j0 = 0; j0 < s->len; j0 += z->stage_n) {
        long n = s->len - j0 < z->stage_n ? s->len - j0 : z->stage_n, at = s->base + j0;
        buf_copy(z->gstage, (char *)gdev + gs * j0, gs * n);                           // gradients down
        buf_zero((char *)gdev + gs * j0, gs * n);                                      // consumed
        if (r->ghalf) adamw_half_host(z->master + at, z->m + at, z->v + at, z->gstage, n, gscale, a, z->wstage, r->half);
        else if (r->half) adamw_mixed_host(z->master + at, z->m + at, z->v + at, z->gstage, n, gscale, a, z->wstage);
        else adamw_f32_host(z->master + at, z->m + at, z->v + at, z->gstage, n, gscale, a, z->wstage);
        buf_copy(wdev + es * j0, z->wstage, es * n);                                  // weights up
    }
}
