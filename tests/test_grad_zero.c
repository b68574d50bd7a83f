// test_grad_zero.c — the optimizer consumes the gradients (parallel/adam.h, zero.h): nothing
// else zeroes them between training steps, so
//  (a) after every zero_step every gradient the next backward accumulates into is zero: ZeRO
//      stages 0, 1, 2 in fp32, bf16 and fp16, with and without gradient accumulation, the tiled
//      16-bit update, overlap_comm, 1-bit Adam past its freeze step, and fp16 steps skipped on
//      overflow;
//  (b) nothing is zeroed too early: with 2 micro-batches of 1 sequence the optimizer sees the
//      gradient of 1 micro-batch of the same 2 sequences (dropless, no auxiliary losses), and the
//      first step's weights are AdamW's of that gradient (it was read before it was zeroed).
// Run by ctest as one process, and by test_mpi_grad_zero.sh under mpirun on 2 data-parallel
// ranks, where (a) also checks that stage 1 zeroes each tensor's parts outside the rank's shard
// (every rank reports its own failures; (b)'s comparisons are one process's).
#include "core/alloc.h"
#include "core/half.h"
#include "core/rng.h"
#include "model/pipeline.h"
#include "parallel/comm.h"
#include "parallel/zero.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int failures = 0, passes = 0, world = 1;
static void expect(int ok, const char *what, double v) {
    if (!ok || comm_world_rank() == 0) printf("%-78s %.2e  %s\n", what, v, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}

enum { T = 8, V = 32, SEQS = 2 };
typedef struct { int step, mb_size; } Batch;

// Sequence j of the step: the same tokens however the step is split into micro-batches.
static void batch(void *ctx, int mb, int *inp, int *tgt) {
    const Batch *b = ctx;
    for (int j = 0; j < b->mb_size; j++)
        for (int t = 0; t < T; t++) {
            uint64_t at = (uint64_t)(mb * b->mb_size + j) * T + t;
            inp[j * T + t] = (int)(rng_at(11, (uint64_t)b->step, at) % V);
            tgt[j * T + t] = (int)(rng_at(12, (uint64_t)b->step, at) % V);
        }
}

typedef struct { int stage, half, accum, onebit, tile, overlap, skip; } Case;

static void config_of(Config *c, const Case *k) {
    config_defaults(c);
    ModelConfig *m = &c->model;
    m->vocab_size = V; m->n_positions = T; m->n_embd = 16; m->n_layer = 2; m->n_head = 2; m->n_inner = 32;
    m->num_experts = 4; m->top_k = 2; m->moe_every = 1; m->capacity_factor = 0; m->aux_coef = 0; m->z_coef = 0;
    c->grad_accum = k->accum; c->micro_batch = SEQS / k->accum;
    c->zero_stage = k->stage; c->reduce_bucket_size = 1;   // stage 2: one bucket per block
    c->bf16 = k->half == 1; c->fp16 = k->half == 2;
    c->onebit = k->onebit; c->freeze_step = 1;
    c->tile_size = k->tile; c->overlap_comm = k->overlap;
    c->lr = 1e-3f; c->warmup = 0;
    if (k->skip) c->scaler.initial_scale_power = 100;   // fp16: every step overflows until the scale is small
}

// The largest |element| of every buffer the next backward accumulates into.
static double grads_left(const Model *M, const Zero *z) {
    const Registry *r = &M->reg;
    double big = 0;
    if (z->stage == 2) {
        size_t es = r->half ? 2 : 4;
        const unsigned char *a = z->gshard, *b = z->bucket;   // zero bits: 0.0 in every format
        for (size_t j = 0; j < es * z->total; j++) big = fmax(big, a[j]);
        for (size_t j = 0; j < es * z->bucket_elems; j++) big = fmax(big, b[j]);
        return big;
    }
    for (long j = 0; j < r->total; j++) big = fmax(big, fabs(r->half ? half_to_f32(r->half, r->g16[j]) : r->g[j]));
    return big;
}

static double step_scale(const Config *c) { return 1.0 / ((double)c->micro_batch * c->grad_accum * T); }

// (a): three steps, the gradients checked after each.
static void run_case(const char *name, const Case *k) {
    Config c;
    config_of(&c, k);
    Topology topo;
    topo_init(&topo, 1, 1, 1);
    Model M;
    model_build(&M, &c, &topo, c.micro_batch, T);
    Pipeline P;
    pipe_init(&P, &M, &c);
    Zero z;
    zero_init(&z, &M.reg, &topo, &c);
    double left = 0;
    int skipped = 0;
    for (int s = 0; s < 3; s++) {
        Batch b = {s, c.micro_batch};
        pipe_train_step(&P, batch, &b, (float)(z.loss_scale * step_scale(&c)), 0, 0);
        pipe_sum_tied(&P);
        zero_step(&z, &c, c.lr);
        skipped += z.skipped;
        left = fmax(left, grads_left(&M, &z));
    }
    char what[160];
    snprintf(what, sizeof what, "%s: every gradient zero after each step", name);
    expect(left == 0 && (k->skip ? skipped > 0 : skipped == 0), what, left);
    zero_free(&z); pipe_free(&P); model_free(&M);
}

// Tensor i's element j of the gradient the optimizer is about to read.
static float grad_at(const Model *M, const Zero *z, int i, long j) {
    return z->stage == 2 ? ((float *)z->gshard)[z->sh[i].base + j] : M->reg.p[i].g[j];
}

// (b): one fp32 step at `stage` with 2 micro-batches against one of 2 sequences.
static void accumulation(int stage) {
    Config c[2];
    Model M[2];
    Pipeline P[2];
    Zero z[2];
    Topology topo;
    topo_init(&topo, 1, 1, 1);
    for (int r = 0; r < 2; r++) {
        Case k = {stage, 0, r ? 2 : 1, 0, 0, 0, 0};
        config_of(&c[r], &k);
        model_build(&M[r], &c[r], &topo, c[r].micro_batch, T);
        pipe_init(&P[r], &M[r], &c[r]);
        zero_init(&z[r], &M[r].reg, &topo, &c[r]);
        Batch b = {0, c[r].micro_batch};
        pipe_train_step(&P[r], batch, &b, (float)step_scale(&c[r]), 0, 0);
        pipe_sum_tied(&P[r]);
    }
    const Registry *reg = &M[1].reg;
    long n = reg->total;
    float *g = ted_alloc(sizeof(float) * n, MEM_TEMP), *w0 = ted_alloc(sizeof(float) * n, MEM_TEMP);
    double diff = 0, big = 0, sq = 0;
    for (int i = 0, at = 0; i < reg->n; i++)
        for (long j = 0; j < reg->p[i].numel; j++, at++) {
            g[at] = grad_at(&M[1], &z[1], i, j);
            w0[at] = reg->p[i].w[j];
            diff = fmax(diff, fabs(g[at] - grad_at(&M[0], &z[0], i, j)));
            big = fmax(big, fabs(g[at]));
            sq += (double)g[at] * g[at];
        }
    char what[160];
    snprintf(what, sizeof what, "stage %d: 2 micro-batches of 1 = 1 of 2: the gradient (rel)", stage);
    expect(diff <= 1e-5 * big && big > 0, what, diff / big);
    zero_step(&z[1], &c[1], c[1].lr);
    // AdamW's first step from zero moments, the gradient clipped to c.clip
    double coef = c[1].clip > 0 && sqrt(sq) > c[1].clip ? c[1].clip / (sqrt(sq) + 1e-6) : 1, worst = 0;
    double b1 = c[1].beta1, b2 = c[1].beta2, lr = c[1].lr;
    for (int i = 0, at = 0; i < reg->n; i++)
        for (long j = 0; j < reg->p[i].numel; j++, at++) {
            double gc = g[at] * coef, m = (1 - b1) * gc / (1 - b1), v = (1 - b2) * gc * gc / (1 - b2);
            double decay = reg->p[i].decay ? 1 - lr * c[1].weight_decay : 1;
            double want = w0[at] * decay - lr * m / (sqrt(v) + c[1].eps);
            worst = fmax(worst, fabs(reg->p[i].w[j] - want));
        }
    snprintf(what, sizeof what, "stage %d: the step's weights are AdamW's of that gradient (abs / lr)", stage);
    expect(worst <= 1e-2 * lr, what, worst / lr);
    ted_free(g); ted_free(w0);
    for (int r = 0; r < 2; r++) { zero_free(&z[r]); pipe_free(&P[r]); model_free(&M[r]); }
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    world = comm_world_size();
    omp_set_num_threads(world > 1 ? 1 : 2);
    const char *kinds[3] = {"fp32", "bf16", "fp16"};
    for (int stage = 0; stage <= 2; stage++)
        for (int half = 0; half < 3; half++)
            for (int accum = 1; accum <= 2; accum++) {
                char name[96];
                snprintf(name, sizeof name, "stage %d %s, %d micro-batch%s", stage, kinds[half], accum, accum > 1 ? "es" : "");
                run_case(name, &(Case){stage, half, accum, 0, 0, 0, 0});
            }
    run_case("stage 1 bf16, tiles of 100", &(Case){1, 1, 2, 0, 100, 0, 0});
    run_case("stage 1 fp32, overlap_comm", &(Case){1, 0, 2, 0, 0, 1, 0});
    run_case("stage 2 bf16, overlap_comm", &(Case){2, 1, 2, 0, 0, 1, 0});
    run_case("1-bit Adam fp32, compressed after step 1", &(Case){0, 0, 2, 1, 0, 0, 0});
    run_case("1-bit Adam bf16, compressed after step 1", &(Case){0, 1, 1, 1, 0, 0, 0});
    for (int stage = 0; stage <= 2; stage++) {
        char name[96];
        snprintf(name, sizeof name, "stage %d fp16, steps skipped on overflow", stage);
        run_case(name, &(Case){stage, 2, 2, 0, 0, 0, 1});
    }
    if (world == 1) { accumulation(0); accumulation(2); }
    printf("rank %d of %d: %d passed, %d failed\n", comm_world_rank(), world, passes, failures);
    comm_finalize();
    return failures != 0;
}
