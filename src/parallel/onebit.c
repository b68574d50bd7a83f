// onebit.c — 1-bit Adam (see onebit.h). Runs on the CPU: a GPU run with OneBitAdam is refused
// by the config check.
#include "parallel/onebit.h"
#include "core/alloc.h"
#include "core/hash.h"
#include "core/half.h"
#include "core/util.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

// Four flat vectors: (DP, expert-DP group) × (replicated over TP, split over TP). The replicated
// tensors have the same gradient on every TP rank; compressed apart from the split ones, their
// scales, errors and so their momenta stay the same on every TP rank too.
static Group *group_of(const Zero *z, int k) { return (Group *)&z->topo->g[k >= 2 ? GROUP_EDP : GROUP_DP]; }
static int kind_of(const Param *p) { return 2 * (p->tag == TAG_EDP) + (p->split_dim >= 0); }
// real elements of chunk q of a group's flat vector
static long chunk_len(const OneBitGroup *b, int q) {
    long n = b->n - q * b->c;
    return n < 0 ? 0 : n < b->c ? n : b->c;
}

// Elements of each rank's chunk of a flat vector of n over S ranks (a multiple of 8, never 0).
static long chunk_of(long n, int S) {
    long c = ((n + S - 1) / S + 7) / 8 * 8;
    return c ? c : 8;
}

double onebit_optimizer_bytes(const Registry *r, int dp, int edp) {
    double n[4] = {0}, b = 0;
    for (int i = 0; i < r->n; i++) n[kind_of(&r->p[i])] += r->p[i].numel;
    for (int k = 0; k < 4; k++) {
        int S = k >= 2 ? edp : dp;
        b += sizeof(float) * (S + 1.0) * chunk_of((long)n[k], S);   // the error feedback: ew, es
    }
    return b;
}

void onebit_init(OneBit *o, Zero *z, const Config *c) {
    memset(o, 0, sizeof *o);
    o->sign = c->compression;
    o->freeze_step = c->freeze_step;
    for (int i = 0; i < z->reg->n; i++) o->g[kind_of(&z->reg->p[i])].n += z->reg->p[i].numel;
    for (int k = 0; k < 4; k++) {
        OneBitGroup *b = &o->g[k];
        int S = group_of(z, k)->size;
        b->c = chunk_of(b->n, S);
        b->rec = o->sign ? 4 + b->c / 8 : 4 * b->c;
        b->x = ted_alloc(sizeof(float) * S * b->c, MEM_COMM);
        b->y = ted_alloc(sizeof(float) * b->c, MEM_COMM);
        b->ew = ted_alloc(sizeof(float) * S * b->c, MEM_OPTIMIZER);
        b->es = ted_alloc(sizeof(float) * b->c, MEM_OPTIMIZER);
        b->send = ted_alloc((size_t)S * b->rec, MEM_COMM);
        b->recv = ted_alloc((size_t)S * b->rec, MEM_COMM);
    }
    z->onebit = o;
}

void onebit_free(OneBit *o) {
    for (int k = 0; k < 4; k++) {
        OneBitGroup *b = &o->g[k];
        ted_free(b->x); ted_free(b->y); ted_free(b->ew); ted_free(b->es); ted_free(b->send); ted_free(b->recv);
    }
    memset(o, 0, sizeof *o);
}

int onebit_active(const Zero *z) { return z->onebit && z->t >= z->onebit->freeze_step; }

// ---------------------------------------------------------------------------------------
// the codec: a chunk of c elements (n real, the rest padding) to rec bytes and back

// Packs x[0, n) into out; with an error buffer, err = x − decode(out) (the compression's loss).
static void encode(const float *x, long n, long c, int sign, uint8_t *out, float *err) {
    if (!sign) { memcpy(out, x, sizeof(float) * c); return; }
    double sq = 0;
    for (long j = 0; j < n; j++) sq += (double)x[j] * x[j];
    float scale = n ? (float)sqrt(sq / (double)n) : 0.0f;
    memcpy(out, &scale, 4);
    uint8_t *bits = out + 4;
    memset(bits, 0, c / 8);
    for (long j = 0; j < n; j++) {
        int pos = x[j] >= 0;
        bits[j >> 3] |= (uint8_t)(pos << (j & 7));
        err[j] = x[j] - (pos ? scale : -scale);
    }
}

// y[0, n) += a · decode(in)  (add) or y = decode(in)  (!add)
static void decode(const uint8_t *in, long n, long c, int sign, float a, float *y, int add) {
    if (!sign) {
        const float *v = (const float *)in;
        for (long j = 0; j < c; j++) y[j] = (add ? y[j] : 0) + a * v[j];
        return;
    }
    float scale;
    memcpy(&scale, in, 4);
    const uint8_t *bits = in + 4;
    for (long j = 0; j < c; j++) {
        float v = j < n ? ((bits[j >> 3] >> (j & 7)) & 1 ? scale : -scale) : 0.0f;
        y[j] = (add ? y[j] : 0) + a * v;
    }
}

// The error-compensated compressed average of b->x over the group (in place).
static void compressed_average(OneBitGroup *b, Group *g, int sign) {
    int S = g->size, r = g->rank;
    long c = b->c;
    for (int q = 0; q < S; q++) {   // phase 1: worker error in, chunk q compressed for rank q
        float *xq = b->x + q * c, *eq = b->ew + q * c;
        long n = chunk_len(b, q);
        if (sign) for (long j = 0; j < n; j++) xq[j] += eq[j];
        encode(xq, n, c, sign, b->send + q * b->rec, eq);
    }
    comm_alltoall(g, b->send, b->recv, b->rec, DT_BYTE);
    long n = chunk_len(b, r);       // phase 2: the owner averages its chunk, server error in
    for (int s = 0; s < S; s++) decode(b->recv + s * b->rec, n, c, sign, 1.0f / S, b->y, s > 0);
    if (sign) for (long j = 0; j < n; j++) b->y[j] += b->es[j];
    uint8_t *mine = b->send;   // free again: the all-to-all has read it
    encode(b->y, n, c, sign, mine, b->es);
    comm_allgather(g, mine, b->recv, b->rec, DT_BYTE);
    for (int q = 0; q < S; q++) decode(b->recv + q * b->rec, chunk_len(b, q), c, sign, 1.0f, b->x + q * c, 0);
}

// the local gradient, element j of tensor p, times s
static inline float grad_at(const Registry *r, const Param *p, long j, float s) {
    return (r->ghalf ? half_to_f32(r->ghalf, p->g16[j]) : p->g[j]) * s;
}

// Each group kind's flat vector of this step's local momenta, β1·m + (1−β1)·S·g_local (z->m keeps the
// last step's m), averaged over its group: b->x then holds the averaged momenta m̄.
static void average_momenta(Zero *z, float b1, float unscale) {
    OneBit *o = z->onebit;
    const Registry *r = z->reg;
    for (int k = 0; k < 4; k++) {
        OneBitGroup *b = &o->g[k];
        if (!b->n) continue;
        long pos = 0;
        for (int i = 0; i < r->n; i++) {
            const Param *p = &r->p[i];
            if (kind_of(p) != k) continue;
            const float *m = z->m + z->sh[i].base, s = unscale * zero_group(z, p)->size;
            float *x = b->x + pos;
            #pragma omp parallel for schedule(static)
            for (long j = 0; j < p->numel; j++) x[j] = b1 * m[j] + (1 - b1) * grad_at(r, p, j, s);
            pos += p->numel;
        }
        memset(b->x + pos, 0, sizeof(float) * (group_of(z, k)->size * b->c - pos));
        compressed_average(b, group_of(z, k), o->sign);
    }
}

// The clipping of a compressed step: Σ (m̄ − β1·m)² over the world, then the coefficient.
typedef struct { double sq; float b1, coef; } Clip;

// Calls fn(tensor i, its m, its averaged m̄ in b->x) for every tensor, group kind by group kind.
typedef void (*TensorFn)(Zero *z, int i, float *m, const float *avg, Clip *k);
static void each_tensor(Zero *z, TensorFn fn, Clip *ctx) {
    long pos[4] = {0};
    for (int i = 0; i < z->reg->n; i++) {
        int k = kind_of(&z->reg->p[i]);
        fn(z, i, z->m + z->sh[i].base, z->onebit->g[k].x + pos[k], ctx);
        pos[k] += z->reg->p[i].numel;
    }
}

// Σ (m̄ − β1·m)² over the elements this rank counts once in the world (a tensor split over TP on each
// TP rank, a replicated one on TP rank 0; the DP replicas, which hold the same m̄, share it).
static void step_sq(Zero *z, int i, float *m, const float *avg, Clip *k) {
    const Param *p = &z->reg->p[i];
    const float b1 = k->b1;
    double acc = 0;
    #pragma omp parallel for reduction(+ : acc) schedule(static)
    for (long j = 0; j < p->numel; j++) { double d = avg[j] - b1 * m[j]; acc += d * d; }
    if ((p->split_dim >= 0 || z->topo->tp_idx == 0) && !p->tied_copy) k->sq += acc / zero_group(z, p)->size;
}

// m = β1·m + coef·(m̄ − β1·m): the averaged step with its gradient part clipped; the gradient,
// consumed, is left zero for the next step (adam.h).
static void clipped_momentum(Zero *z, int i, float *m, const float *avg, Clip *k) {
    Param *p = &z->reg->p[i];
    const float b1 = k->b1, coef = k->coef;
    Precision half = z->reg->ghalf;
    if (coef == 1.0f) memcpy(m, avg, sizeof(float) * p->numel);   // unclipped: m̄ itself
    else {
        #pragma omp parallel for schedule(static)
        for (long j = 0; j < p->numel; j++) m[j] = b1 * m[j] + coef * (avg[j] - b1 * m[j]);
    }
    if (half) memset(p->g16, 0, sizeof(uint16_t) * p->numel);
    else memset(p->g, 0, sizeof(float) * p->numel);
}

double onebit_norm(Zero *z, float unscale) {
    const Registry *r = z->reg;
    double sq = 0;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        int S = zero_group(z, p)->size;
        double acc = 0;
        #pragma omp parallel for reduction(+ : acc) schedule(static)
        for (long j = 0; j < p->numel; j++) { double g = grad_at(r, p, j, unscale * S); acc += g * g; }
        if ((p->split_dim >= 0 || z->topo->tp_idx == 0) && !p->tied_copy) sq += acc / S;
    }
    comm_allreduce((Group *)&z->topo->g[GROUP_WORLD], &sq, 1, DT_F64);
    return sqrt(sq);
}

double onebit_update(Zero *z, const Config *c, float lr, float unscale) {
    Registry *r = z->reg;
    z->t++;
    float b1 = c->beta1;
    average_momenta(z, b1, unscale);
    // the averaged gradient ḡ = (m̄ − β1·m)/(1−β1): with compression "none" the global gradient, so its
    // norm clips the step as one process's would (design §3)
    Clip k = {0, b1, 1.0f};
    each_tensor(z, step_sq, &k);
    comm_allreduce((Group *)&z->topo->g[GROUP_WORLD], &k.sq, 1, DT_F64);
    double norm = b1 < 1 ? sqrt(k.sq) / (1 - b1) : 0;
    if (c->clip > 0 && norm > c->clip) k.coef = (float)(c->clip / (norm + 1e-6));
    each_tensor(z, clipped_momentum, &k);
    // 1-bit Adam (docs/parallel.md): v̂ = v/(1−β2^freeze_step) stays frozen with v; m keeps accumulating, so
    // m̂ = m/(1−β1^t) goes on with the step t (this step's count, as Adam's)
    float bc1 = 1.0f - powf(c->beta1, (float)z->t), bc2 = 1.0f - powf(c->beta2, (float)z->onebit->freeze_step);
    for (int i = 0; i < r->n; i++) {
        Param *p = &r->p[i];
        long base = z->sh[i].base;
        float decay = p->decay ? 1.0f - lr * c->weight_decay : 1.0f;
        float *w = z->master + base, *m = z->m + base, *v = z->v + base;
        #pragma omp parallel for schedule(static)
        for (long j = 0; j < p->numel; j++) {
            w[j] = w[j] * decay - (lr / bc1) * m[j] / (sqrtf(v[j]) / sqrtf(bc2) + c->eps);
            if (r->half) p->w16[j] = half_from_f32(r->half, w[j]);
            else p->w[j] = w[j];
        }
    }
    return norm;
}

// ---------------------------------------------------------------------------------------
// checkpoints: onebit.rank<R>.bin = header (magic, world, rank, tp, ep, per group n and c, the
// FNV-1a checksum of what follows), then per group the worker and the server error

typedef struct { char magic[8]; int32_t world, rank, tp, ep; int64_t n[4], c[4]; uint64_t sum; } ErrHeader;

static void header_of(const Zero *z, ErrHeader *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, "TEDOB02", 8);
    h->world = z->topo->world; h->rank = z->topo->rank; h->tp = z->topo->tp; h->ep = z->topo->ep;
    for (int k = 0; k < 4; k++) { h->n[k] = z->onebit->g[k].n; h->c[k] = z->onebit->g[k].c; }
}

static uint64_t errors_sum(const Zero *z) {
    uint64_t sum = 0;
    for (int k = 0; k < 4; k++) {
        const OneBitGroup *b = &z->onebit->g[k];
        sum = hash_fnv1a(b->ew, sizeof(float) * group_of(z, k)->size * b->c, sum);
        sum = hash_fnv1a(b->es, sizeof(float) * b->c, sum);
    }
    return sum;
}

static long file_bytes(const Zero *z) {
    long bytes = sizeof(ErrHeader);
    for (int k = 0; k < 4; k++) bytes += (long)sizeof(float) * (group_of(z, k)->size + 1) * z->onebit->g[k].c;
    return bytes;
}

static void err_path(const Zero *z, const char *dir, char *path, size_t n) {
    snprintf(path, n, "%s/onebit.rank%d.bin", dir, z->topo->rank);
}

int onebit_save(const Zero *z, const char *dir) {
    char path[1400];
    err_path(z, dir, path, sizeof path);
    FILE *f = fopen(path, "wb");
    if (!f) { ted_error("%s: cannot write: %s", path, strerror(errno)); return -1; }
    ErrHeader h;
    header_of(z, &h);
    h.sum = errors_sum(z);
    int ok = fwrite(&h, sizeof h, 1, f) == 1;
    for (int k = 0; k < 4 && ok; k++) {
        const OneBitGroup *b = &z->onebit->g[k];
        long S = group_of(z, k)->size;
        ok = fwrite(b->ew, sizeof(float), S * b->c, f) == (size_t)(S * b->c) &&
             fwrite(b->es, sizeof(float), b->c, f) == (size_t)b->c;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;   // on disk before the checkpoint is renamed in
    if (fclose(f) || !ok) { ted_error("%s: write failed: %s", path, strerror(errno)); return -1; }
    return 0;
}

static void errors_zero(Zero *z) {
    for (int k = 0; k < 4; k++) {
        OneBitGroup *b = &z->onebit->g[k];
        memset(b->ew, 0, sizeof(float) * group_of(z, k)->size * b->c);
        memset(b->es, 0, sizeof(float) * b->c);
    }
}

// Reads the errors: 0 when read whole and checksummed, else -1 with why (after the path) in msg.
static int errors_read(Zero *z, FILE *f, long size, char *msg, size_t n) {
    ErrHeader h, want;
    header_of(z, &want);
    int r = z->topo->rank;
    if (size != file_bytes(z)) {
        snprintf(msg, n, "%ld bytes, 1-bit Adam's errors of rank %d need %ld (truncated or corrupt)", size, r, file_bytes(z));
        return -1;
    }
    int ok = fread(&h, sizeof h, 1, f) == 1;
    uint64_t sum = h.sum;
    h.sum = 0;
    if (!ok || memcmp(&h, &want, sizeof h)) {
        snprintf(msg, n, "not 1-bit Adam's errors of rank %d of this layout (its header differs)", r);
        return -1;
    }
    for (int k = 0; k < 4 && ok; k++) {
        OneBitGroup *b = &z->onebit->g[k];
        long S = group_of(z, k)->size;
        ok = fread(b->ew, sizeof(float), S * b->c, f) == (size_t)(S * b->c) && fread(b->es, sizeof(float), b->c, f) == (size_t)b->c;
    }
    if (ok && errors_sum(z) == sum) return 0;
    snprintf(msg, n, "1-bit Adam's errors of rank %d fail their checksum (corrupt)", r);
    return -1;
}

int onebit_load(Zero *z, const char *dir, int same_layout) {
    char path[1400], why[200];
    err_path(z, dir, path, sizeof path);
    FILE *f = fopen(path, "rb");
    struct stat sb;
    long size = f && !fstat(fileno(f), &sb) ? (long)sb.st_size : -1;
    if (!f) snprintf(why, sizeof why, "missing: the checkpoint was saved by this layout (world %d, tp %d, ep %d) and "
                     "needs 1-bit Adam's errors of every rank", z->topo->world, z->topo->tp, z->topo->ep);
    int rc = f ? errors_read(z, f, size, why, sizeof why) : -1;
    if (f) fclose(f);
    if (!rc) return 0;
    errors_zero(z);
    if (same_layout) {   // saved by this very layout: every rank's file must be there, whole
        ted_error("%s: %s", path, why);
        return -1;
    }
    if (z->t > z->onebit->freeze_step && z->topo->rank == 0)
        printf("note: %s: no 1-bit Adam errors of this layout (world %d, tp %d, ep %d): they start from zero\n", dir,
               z->topo->world, z->topo->tp, z->topo->ep);
    return 0;
}
