// zero.c — ZeRO AdamW, stages 0, 1, 2 (see zero.h).
#include "parallel/zero.h"
#include "parallel/adam_cuda.h"
#include "parallel/zero_bucket.h"
#include "parallel/zero_overlap.h"
#include "parallel/onebit.h"
#include "parallel/adam.h"
#include "parallel/offload.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "nn/fresh.h"
#include "nn/ops.h"
#include "parallel/comm.h"
#include "core/half.h"
#include "core/util.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

// This rank's shard of each tensor: a 1/size chunk (stages 1, 2) or the whole tensor (stage 0).
static void make_shards(Zero *z) {
    const Registry *reg = z->reg;
    z->sh = ted_alloc(sizeof(Shard) * reg->n, MEM_TEMP);
    for (int i = 0; i < reg->n; i++) {
        const Param *p = &reg->p[i];
        Group *g = zero_group(z, p);
        Shard *s = &z->sh[i];
        int parts = z->stage == 0 ? 1 : g->size, part = z->stage == 0 ? 0 : g->rank;
        s->chunk = (p->numel + parts - 1) / parts;
        s->off = s->chunk * part;
        s->len = p->numel - s->off < s->chunk ? p->numel - s->off : s->chunk;
        if (s->len < 0) s->len = 0;
        s->own = z->stage > 0 || g->rank == 0;
        s->base = z->total;
        z->total += s->len;
    }
}

void zero_size(ZeroSize *s, const Registry *r, int dp, int edp, const Config *c, int gpu) {
    memset(s, 0, sizeof *s);
    // the GPU's bf16 keeps fp32 gradients (params.h: ghalf)
    Precision prec = cfg_precision(c);
    double es = precision_bytes(prec), gs = prec == PREC_FP16 || (prec == PREC_BF16 && !gpu) ? 2 : 4, shard = 0;
    int whole = 1;
    for (int i = 0; i < r->n; i++) {   // rank 0's shard (as make_shards): the first chunk of each tensor
        int n = c->zero_stage == 0 ? 1 : r->p[i].tag == TAG_EDP ? edp : dp;
        shard += (r->p[i].numel + n - 1) / n;
        whole &= n == 1;
    }
    s->params = es * r->total;
    s->grads = gs * (c->zero_stage == 2 ? bucket_elems_of(r, dp, edp, c->reduce_bucket_size, c->overlap_comm) + shard : r->total);
    int in_place = es == 4 && !gpu && whole;   // masters_are_weights
    double opt = sizeof(float) * shard * (in_place ? 2 : 3) + (c->onebit ? onebit_optimizer_bytes(r, dp, edp) : 0);
    if (c->offload && gpu) s->host_optimizer = opt;
    else s->optimizer = opt;
}

// fp32 weights on the CPU whose every shard is the whole tensor, at its place (one process, or
// stage 0): the masters are the weights themselves, updated in place, with no second copy.
static int masters_are_weights(const Zero *z) {
    const Registry *r = z->reg;
    if (r->half || ted_device != DEV_CPU) return 0;
    for (int i = 0; i < r->n; i++)
        if (z->sh[i].off || z->sh[i].len != r->p[i].numel || z->sh[i].base != (long)r->p[i].off) return 0;
    return 1;
}

void zero_init(Zero *z, Registry *reg, const Topology *topo, const Config *c) {
    memset(z, 0, sizeof *z);
    z->reg = reg; z->topo = topo;
    z->stage = c->zero_stage;
    make_shards(z);
    // the shard lives on the run's device (offloaded: on the host); a GPU run keeps a host copy
    // for checkpoints
    size_t bytes = sizeof(float) * z->total;
    if (!offload_init(z, c)) {
        z->in_place = masters_are_weights(z);
        z->dev[0] = z->master = z->in_place ? reg->w : ted_alloc_buf(bytes, MEM_OPTIMIZER);
        z->dev[1] = z->m = ted_alloc_buf(bytes, MEM_OPTIMIZER);
        z->dev[2] = z->v = ted_alloc_buf(bytes, MEM_OPTIMIZER);
        for (int i = 0; i < 3; i++) z->host[i] = ted_device == DEV_CPU ? z->dev[i] : ted_alloc(bytes, MEM_MIRROR);
    }
    zero_sync_master(z);
    z->sq = ted_alloc_buf(sizeof(double) * (reg->n + 1), MEM_TEMP);   // per tensor, and their norm's sum
    z->sq_host = ted_alloc(sizeof(double) * (reg->n + 1), MEM_TEMP);
    z->loss_scale = scaler_init(&z->scaler, &c->scaler, reg->half == PREC_FP16);
    CHECK(z->stage < 2 || reg->grads_external, "ZeRO stage 2 needs a registry without a gradient buffer");
    if (z->stage == 2) bucket_plan(z, c->reduce_bucket_size, c->overlap_comm);
    if (c->overlap_comm) overlap_init(z, c->grad_accum);
    if (c->onebit) onebit_init(ted_alloc(sizeof(OneBit), MEM_TEMP), z, c);
    if (z->stage == 2 && topo->rank == 0)
        printf("ZeRO-2: gradient shard %ld elements, bucket %ld elements (%ld deferred: the tensors outside the "
               "blocks), %d buckets\n", z->total, z->bucket_elems, z->deferred_elems, z->nbk);
}

void zero_sync_master(Zero *z) {
    if (z->offload) { offload_sync_master(z); return; }
    const Registry *r = z->reg;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        const Shard *s = &z->sh[i];
        if (r->half) convert_to_f32(z->master + s->base, p->w16 + s->off, s->len, r->half);
        else if (!z->in_place) buf_copy(z->master + s->base, p->w + s->off, sizeof(float) * s->len);
    }
}

static void view(Zero *z, float **from, float **to, int copy) {
    for (int i = 0; i < 3; i++) if (copy && to[i] != from[i]) buf_copy(to[i], from[i], sizeof(float) * z->total);
    z->master = to[0]; z->m = to[1]; z->v = to[2];
}
void zero_host_view(Zero *z, int copy) { view(z, z->dev, z->host, copy); }
void zero_device_view(Zero *z, int copy) { view(z, z->host, z->dev, copy); }

void zero_free(Zero *z) {
    if (z->reg) zero_params_wait(z, 0, z->reg->n);   // the optimizer's parts beside the forward: done first
    overlap_free(z);   // waits for whatever is still in flight
    fresh_reset();     // the gradients it marked go with the model: no range may outlive them
    for (int i = 0; i < 3; i++) {
        if (z->host[i] != z->dev[i]) ted_free(z->host[i]);
        if (z->offload) ted_free(z->dev[i]);
        else if (!(i == 0 && z->in_place)) ted_free_buf(z->dev[i]);
    }
    if (z->offload) offload_free(z);
    if (z->stage != 2) { ted_free_buf(z->comm[0]); ted_free_buf(z->comm[1]); }
    ted_free(z->sh); ted_free_buf(z->tile);
    ted_free_buf(z->sq); ted_free(z->sq_host);
#ifdef TED_CUDA
    cu_opt_free(z->dplan);   // waits for its parts
    if (z->dpart) { z->reg->weights_needed = NULL; z->reg->weights_ctx = NULL; ted_free(z->dpart); }
#endif
    if (z->stage == 2) bucket_free(z);
    if (z->onebit) { onebit_free(z->onebit); ted_free(z->onebit); }
    memset(z, 0, sizeof *z);
}

// The optimizer's buffers, made at the first step and kept (nothing is allocated per step):
// the two communication buffers of the largest padded tensor, and the up-cast tile.
static void plan_buffers(Zero *z, long tile) {
    if (z->planned) return;
    z->planned = 1;
    // the up-cast tile (offloaded: the host stages its own tiles)
    if (z->reg->ghalf && !z->offload) z->tile = ted_alloc_buf(sizeof(float) * (tile > 0 ? tile : 1), MEM_TEMP);
    if (z->stage == 0 || z->ov) return;   // all-reduced in place, nothing gathered; overlap: its own regions
    // stage 2: the bucket buffer is free in the optimizer step and holds every tensor's padded
    // slot; recv holds the largest chunk. Both serve the gather (the bucket is zeroed after).
    if (z->stage == 2) { z->comm[0] = z->bucket; z->comm[1] = z->recv; return; }
    size_t es = z->reg->half && z->reg->ghalf ? 2 : 4, big = 0, chunk = 0;   // gradients and weights travel
    for (int i = 0; i < z->reg->n; i++) {
        const Shard *s = &z->sh[i];
        int size = zero_group(z, &z->reg->p[i])->size;
        if (size == 1) continue;   // nothing travels
        size_t padded = (size_t)s->chunk * size;
        if (padded > big) big = padded;
        if ((size_t)s->chunk > chunk) chunk = s->chunk;
    }
    if (big) { z->comm[0] = ted_alloc_buf(es * big, MEM_COMM); z->comm[1] = ted_alloc_buf(es * chunk, MEM_COMM); }
}

// Sum the gradient over the DP group into the owner's shard (in place at p->g + off; stage 0:
// the whole tensor on every rank; stage 2 did it during the backward). Each rank's loss
// gradient is already scaled by 1/(tokens of the whole step), so the sum is the
// single-process gradient.
// (16-bit gradients travel in 16 bits, each addition done in fp32.)
static void reduce_grad(Zero *z, Param *p, const Shard *s) {
    Group *g = zero_group(z, p);
    Precision half = z->reg->ghalf;
    DType t = comm_dtype(half);
    if (g->size == 1 || z->stage == 2) return;
    if (z->stage == 0) { comm_allreduce(g, half ? (void *)p->g16 : (void *)p->g, p->numel, t); return; }
    // reduce-scatter needs equal chunks: pad the tensor to chunk·size
    size_t es = half ? 2 : 4;
    long padded = s->chunk * g->size;
    char *buf = z->comm[0], *mine = z->comm[1];
    char *grad = half ? (char *)p->g16 : (char *)p->g;
    buf_copy(buf, grad, es * p->numel);
    buf_zero(buf + es * p->numel, es * (padded - p->numel));
    comm_reduce_scatter(g, buf, mine, s->chunk, t);
    buf_copy(grad + es * s->off, mine, es * s->len);
}

static void gather_param(Zero *z, Param *p, const Shard *s) {
    Group *g = zero_group(z, p);
    if (g->size == 1 || z->stage == 0) return;
    size_t es = z->reg->half ? 2 : 4;   // the parameters travel in their storage format
    char *buf = z->comm[0], *mine = z->comm[1];
    char *w = z->reg->half ? (char *)p->w16 : (char *)p->w;
    buf_copy(mine, w + es * s->off, es * s->len);
    comm_allgather(g, mine, buf, s->chunk * (long)es, DT_BYTE);
    buf_copy(w, buf, es * p->numel);
}

// Tensor i's all-gather: now, or (overlap) started and waited for before the next forward reads it.
static void gather(Zero *z, int i) {
    if (z->ov) overlap_gather(z, i);
    else gather_param(z, &z->reg->p[i], &z->sh[i]);
}

void zero_params_wait(Zero *z, int i0, int i1) {
    if (z->ov) overlap_params_wait(z, i0, i1);
#ifdef TED_CUDA
    if (z->dpart && i1 > i0) {   // the optimizer's part holding tensor i1 − 1, and those before it
        int k = 0;
        while (k + 1 < z->ndpart && z->dpart[k + 1] < i1) k++;
        cu_opt_wait(z->dplan, k);
    }
#endif
}

// Σ (s·x)² over a shard, in double, by one thread: vectorised (an OpenMP SIMD reduction), in an
// order fixed by the code, not by the thread count.
static double sumsq_host(const void *x, long n, int half, float s) {
    double acc = 0;
    if (half == PREC_BF16) {
        const uint16_t *restrict h = x;
        #pragma omp simd reduction(+ : acc)
        for (long j = 0; j < n; j++) { double g = bf16_to_f32(h[j]) * s; acc += g * g; }
    } else if (half == PREC_FP16) {   // up-cast a block at a time by core/half.h's F16C conversions
        float f[512];
        for (long b = 0; b < n; b += 512) {
            long k = n - b < 512 ? n - b : 512;
            fp16_to_f32_n(f, (const uint16_t *)x + b, k);
            #pragma omp simd reduction(+ : acc)
            for (long j = 0; j < k; j++) { double g = f[j] * s; acc += g * g; }
        }
    } else {
        const float *restrict f = x;
        #pragma omp simd reduction(+ : acc)
        for (long j = 0; j < n; j++) acc += (double)f[j] * f[j];
    }
    return acc;
}

// The shard's gradients of tensor i: in place in the registry, or (stage 2) in the shard buffer.
static void *shard_grad(const Zero *z, int i) {
    const Registry *r = z->reg;
    const Shard *s = &z->sh[i];
    if (z->stage == 2) return r->ghalf ? (void *)((uint16_t *)z->gshard + s->base) : (void *)((float *)z->gshard + s->base);
    return r->ghalf ? (void *)(r->p[i].g16 + s->off) : (void *)(r->p[i].g + s->off);
}

// Tensor i counts in the global norm on this rank: each parameter once, whatever the layout
// (replicated over TP: on one TP rank; the tied wte: on the first pipeline stage; stage 0: on
// the group's first rank).
static int counted(const Zero *z, int i) {
    const Param *p = &z->reg->p[i];
    return z->sh[i].own && (p->split_dim >= 0 || z->topo->tp_idx == 0) && !p->tied_copy;
}

#ifdef TED_CUDA
// A GPU run's fp32 gradients (fp32 and bf16 weights, not offloaded): the step is the segment
// table's (adam_cuda.h), made at the first step: the norm summed on the device and over the
// world (a device double), then AdamW over every shard in one launch, which clips and skips a
// non-finite step itself. The host reads the norm once, after the launch, for the log.
static int on_device(const Zero *z) { return ted_device == DEV_CUDA && !z->reg->ghalf && !z->offload && !z->onebit; }

// TED_OPT_OVERLAP=1: AdamW runs beside the next step's forward, in parts on the optimizer's own
// stream, the forward waiting (weights_needed) for the part that holds a block's tensors before it
// reads them. Where every shard is its whole tensor only (no all-gather after the update: one rank
// of data parallelism per tensor, or stage 0), and not with stage 2's buckets.
static int device_overlap(Zero *z) {
    const char *e = getenv("TED_OPT_OVERLAP");
    if (!e || atoi(e) != 1 || z->stage == 2 || z->ov) return 0;
    for (int i = 0; i < z->reg->n; i++)
        if (z->stage > 0 && zero_group(z, &z->reg->p[i])->size > 1) return 0;
    return 1;
}

static void overlap_weights_hook(void *zero, int i0, int i1) { zero_params_wait(zero, i0, i1); }

// The parts: consecutive tensors (the registry's order is the forward's) of at least TED_OPT_PART
// shard elements each (16 M: about 0.15 ms of AdamW on an H200), the last part what is left
static void device_parts(Zero *z) {
    const char *e = getenv("TED_OPT_PART");
    long kPart = e && atol(e) > 0 ? atol(e) : 1L << 24;
    Registry *r = z->reg;
    z->dpart = ted_alloc(sizeof(int) * (r->n + 1), MEM_TEMP);
    long acc = 0;
    z->ndpart = 0;
    z->dpart[0] = 0;
    for (int i = 0; i < r->n; i++) {
        acc += z->sh[i].len;
        if (acc >= kPart || i == r->n - 1) { z->dpart[++z->ndpart] = i + 1; acc = 0; }
    }
    r->weights_needed = overlap_weights_hook;
    r->weights_ctx = z;
}

static void device_plan(Zero *z) {
    Registry *r = z->reg;
    OptSeg *seg = ted_alloc(sizeof(OptSeg) * (r->n ? r->n : 1), MEM_TEMP);
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        const Shard *s = &z->sh[i];
        void *w = r->half ? (void *)(p->w16 + s->off) : (void *)(p->w + s->off);
        seg[i] = (OptSeg){shard_grad(z, i), w, s->base, s->len, p->decay, counted(z, i)};
    }
    z->dplan = cu_opt_plan(seg, r->n, r->half == PREC_BF16);
    ted_free(seg);
    if (device_overlap(z)) device_parts(z);
}
#endif

// z->sq[i] = the squared norm of tensor i's shard (16-bit: unscaled). On the CPU the threads share
// out the tensors, one tensor to a thread: 2.4 ms instead of 15 for the bench model's 18 M.
static void sumsq_all(Zero *z, float unscale) {
    const Registry *r = z->reg;
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA && !r->ghalf) {   // fp32 gradients are unscaled (offloaded: the host steps)
        if (!z->dplan) device_plan(z);
        cu_opt_norm(z->dplan, z->sq);
        return;
    }
    if (ted_device == DEV_CUDA) {
        for (int i = 0; i < r->n; i++) cu_sumsq_half(z->sq + i, shard_grad(z, i), z->sh[i].len, r->ghalf, unscale);
        return;
    }
#endif
    #pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < r->n; i++) z->sq[i] = sumsq_host(shard_grad(z, i), z->sh[i].len, r->ghalf, r->ghalf ? unscale : 1.0f);
}

// The gradients summed to their owners (stage 2 did it in the backward's buckets).
static void reduce_all(Zero *z) {
    Registry *r = z->reg;
    if (z->ov && z->stage == 2) { bucket_wait_all(z); z->ov->mb = 0; }
    else if (z->ov) overlap_reduce_wait(z);
    else for (int i = 0; i < r->n; i++) reduce_grad(z, &r->p[i], &z->sh[i]);
}

// Reduces the gradients to their owners and returns the global norm (unscaled).
static double reduce_and_norm(Zero *z, float unscale) {
    Registry *r = z->reg;
    reduce_all(z);
    sumsq_all(z, unscale);
    const double *part = buf_to_host(z->sq_host, z->sq, sizeof(double) * r->n);
    double sq = 0;
    for (int i = 0; i < r->n; i++) if (counted(z, i)) sq += part[i];
    comm_allreduce((Group *)&z->topo->g[GROUP_WORLD], &sq, 1, DT_F64);
    return sqrt(sq);
}

#ifdef TED_CUDA
static double device_step(Zero *z, const Config *c, float lr) {
    Registry *r = z->reg;
    if (!z->dplan) device_plan(z);
    fresh_settle();   // what no op wrote this step is zero before anything reads it (nn/fresh.h)
    reduce_all(z);
    cu_opt_norm(z->dplan, z->sq);   // z->sq[n]: this rank's counted sum of squares
    comm_allreduce((Group *)&z->topo->g[GROUP_WORLD], z->sq + r->n, 1, DT_F64);
    z->t++;
    float bc1 = 1.0f - powf(c->beta1, (float)z->t), bc2 = 1.0f - powf(c->beta2, (float)z->t);
    OptStep h = {lr / bc1, sqrtf(bc2), 1.0f - lr * c->weight_decay, c->beta1, c->beta2, c->eps, c->clip,
                 z->stage == 2};   // stages 0 and 1: the gradients are marked fresh instead (step)
    if (z->dpart) {   // beside the next forward, which waits for each part (zero_params_wait)
        for (int k = 0; k < z->ndpart; k++)
            cu_opt_adamw_part(z->dplan, z->dpart[k], z->dpart[k + 1], k, z->master, z->m, z->v, z->sq + r->n, &h);
    } else {
        cu_opt_adamw(z->dplan, z->master, z->m, z->v, z->sq + r->n, &h);
        for (int i = 0; i < r->n; i++) gather(z, i);
    }
    double sq;
    buf_to_host(&sq, z->sq + r->n, sizeof sq);   // the main stream's norm: not the parts
    if (!isfinite(sq)) z->t--;   // skipped: the kernel left the weights and moments as they were
    return sqrt(sq);
}
#endif

// AdamW on the shard of every tensor, the new weights written back (16-bit: rounded) and
// gathered, the shard's gradients left zero in the same pass (adam.h). 16-bit gradients are
// up-cast tile by tile into one fp32 buffer.
static void update(Zero *z, const Config *c, float lr, float gscale, long tile) {
    Registry *r = z->reg;
    int half = r->ghalf;   // 16-bit gradients (with 16-bit weights)
    z->t++;
    float bc1 = 1.0f - powf(c->beta1, (float)z->t), bc2 = 1.0f - powf(c->beta2, (float)z->t);
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        Shard *s = &z->sh[i];
        AdamHyper a = {lr, p->decay ? 1.0f - lr * c->weight_decay : 1.0f, c->beta1, c->beta2, c->eps, bc1, bc2};
        if (z->offload) { offload_step(z, i, shard_grad(z, i), &a, gscale); gather(z, i); continue; }
        long step = half ? tile : s->len;   // fp32 gradients need no up-cast: one pass
        for (long j0 = 0; j0 < s->len; j0 += step) {
            long n = s->len - j0 < step ? s->len - j0 : step, at = s->base + j0;
            if (half)
                adamw_half(z->master + at, z->m + at, z->v + at, (uint16_t *)shard_grad(z, i) + j0, n, gscale, &a,
                           p->w16 + s->off + j0, half, z->tile);
            else
                adamw_f32_host(z->master + at, z->m + at, z->v + at, (float *)shard_grad(z, i) + j0, n, gscale, &a,
                          z->in_place ? NULL : p->w + s->off + j0);
        }
        // every rank of the group gets the whole updated tensor
        gather(z, i);
    }
}

// The gradients no update consumed start the next step at zero as well: on a skipped step all of
// them; at stage 1, each tensor's parts outside this rank's shard (the other ranks update those).
static void zero_unconsumed(Zero *z, int all) {
    Registry *r = z->reg;
    size_t es = r->ghalf ? 2 : 4;
    if (all && z->stage == 2) buf_zero(z->gshard, es * z->total);
    else if (all) buf_zero(r->ghalf ? (void *)r->g16 : (void *)r->g, es * r->total);
    if (all || z->stage != 1) return;
    for (int i = 0; i < r->n; i++) {
        const Shard *s = &z->sh[i];
        long numel = r->p[i].numel, end = s->off + s->len;
        char *g = r->ghalf ? (char *)r->p[i].g16 : (char *)r->p[i].g;
        buf_zero(g, es * (s->off < numel ? s->off : numel));
        if (end < numel) buf_zero(g + es * end, es * (numel - end));
    }
}

// stage 2: the bucket (it served the gather) starts the next step at zero
static void finish_stage2(Zero *z) {
    if (z->stage == 2) buf_zero(z->bucket, (z->reg->ghalf ? 2 : 4) * z->bucket_elems);
}

static double step(Zero *z, const Config *c, float lr) {
    float unscale = 1.0f / z->loss_scale;
    long tile = c->tile_size > 0 && c->tile_size < z->total ? c->tile_size : z->total;
    plan_buffers(z, tile);
    zero_params_wait(z, 0, z->reg->n);   // overlap: the last step's gathers (the forward waited for them)
    int compressed = onebit_active(z);   // 1-bit Adam after its warm-up
    double norm;
#ifdef TED_CUDA
    int device = on_device(z);
    if (device) norm = device_step(z, c, lr);
    else
#endif
    norm = compressed ? onebit_norm(z, unscale) : reduce_and_norm(z, unscale);
    // fp16 overflow (an inf or nan anywhere makes the norm one): skip the step, lower the scale
    z->skipped = !isfinite(norm);
    z->loss_scale = scaler_update(&z->scaler, z->loss_scale, z->skipped);
#ifdef TED_CUDA
    if (device && z->stage != 2) {   // every gradient counts as zero until an op writes it (nn/fresh.h)
        if (z->dpart && fresh_poisoned()) zero_params_wait(z, 0, z->reg->n);   // the parts read them first
        fresh_mark(z->reg->g, z->reg->total);
        return norm;
    }
    if (device) { zero_unconsumed(z, z->skipped); finish_stage2(z); return norm; }
#endif
    if (!z->skipped) {
        float coef = c->clip > 0 && norm > c->clip ? (float)(c->clip / (norm + 1e-6)) : 1.0f;
        if (compressed) norm = onebit_update(z, c, lr, unscale);   // clipped by the averaged gradient's norm
        else update(z, c, lr, z->reg->ghalf ? unscale * coef : coef, tile);
    }
    // the updates left the gradients they read at zero; the rest now. The next step's backward
    // accumulates into zeros: nothing clears the gradients between steps or micro-batches.
    zero_unconsumed(z, z->skipped);
    finish_stage2(z);
    return norm;
}

double zero_step(Zero *z, const Config *c, float lr) {
    double norm = step(z, c, lr);
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) cu_prof_step();   // TED_GPU_PROF: a training step ends here
#endif
    return norm;
}
