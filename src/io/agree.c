// agree.c — rank agreement before training (see agree.h). Every field travels as 64 bits
// (integers as themselves, floats as doubles' bits) in one all-gather of a
// fixed size, so that ranks given different argv never exchange messages of different sizes.
#include "io/agree.h"
#include "core/alloc.h"
#include "core/hash.h"
#include "io/ckpt_meta.h"
#include "parallel/comm.h"
#include "core/util.h"
#include <string.h>

uint64_t agree_hash(const void *p, size_t n, uint64_t h) { return hash_fnv1a(p, n, h); }

typedef enum { K_INT, K_FLOAT } FieldKind;
typedef struct { const char *name; FieldKind kind; } FieldInfo;
#define AGREE_MAX 64

typedef struct { int n; FieldInfo info[AGREE_MAX]; uint64_t v[AGREE_MAX]; } Digest;

static void put_int(Digest *d, const char *name, int64_t x) {
    d->info[d->n] = (FieldInfo){name, K_INT};
    memcpy(&d->v[d->n++], &x, 8);
}
static void put_float(Digest *d, const char *name, double x) {
    d->info[d->n] = (FieldInfo){name, K_FLOAT};
    memcpy(&d->v[d->n++], &x, 8);
}

// The settings every rank must share (paths that only rank 0 uses are left out).
static void digest_config(Digest *d, const Config *c) {
    const ModelConfig *m = &c->model;
    put_int(d, "world size", comm_world_size());
    put_int(d, "vocab_size", m->vocab_size); put_int(d, "n_positions", m->n_positions);
    put_int(d, "n_embd", m->n_embd); put_int(d, "n_layer", m->n_layer); put_int(d, "n_head", m->n_head);
    put_int(d, "n_inner", m->n_inner); put_int(d, "num_experts", m->num_experts); put_int(d, "top_k", m->top_k);
    put_int(d, "moe_every", m->moe_every); put_float(d, "capacity_factor", m->capacity_factor);
    put_int(d, "min_capacity", m->min_capacity); put_int(d, "group_size", m->group_size);
    put_float(d, "aux_coef", m->aux_coef); put_float(d, "z_coef", m->z_coef);
    put_int(d, "seq_len", c->seq_len); put_int(d, "micro_batch", c->micro_batch); put_int(d, "grad_accum", c->grad_accum);
    put_int(d, "steps", c->steps); put_float(d, "lr", c->lr); put_float(d, "min_lr", c->min_lr);
    put_int(d, "warmup", c->warmup); put_float(d, "beta1", c->beta1); put_float(d, "beta2", c->beta2);
    put_float(d, "eps", c->eps); put_float(d, "weight_decay", c->weight_decay); put_float(d, "clip", c->clip);
    put_int(d, "seed", (int64_t)c->seed); put_int(d, "data_order", c->data_sequential);
    put_int(d, "zero stage", c->zero_stage); put_int(d, "bf16", c->bf16); put_int(d, "fp16", c->fp16);
    put_int(d, "activation_checkpointing", c->activation_checkpointing); put_int(d, "dtd", c->dtd);
    put_int(d, "cac", c->cac); put_int(d, "tile_size", c->tile_size); put_int(d, "tp", c->tp); put_int(d, "ep", c->ep);
    put_int(d, "device", c->device); put_int(d, "--save given", c->save[0] != 0); put_int(d, "save_every", c->save_every);
    put_int(d, "--resume given", c->resume[0] != 0); put_int(d, "eval_every", c->eval_every);
    put_int(d, "eval_windows", c->eval_windows); put_int(d, "--watchdog", c->watchdog);
    put_int(d, "--log-tensors", c->log_tensors); put_float(d, "--debug-expert-grad-scale", c->debug_expert_grad_scale);
}

// The resumed trainer state; 0, or -1 after one (deferred) line when it cannot be read.
static int digest_state(Digest *d, const char *ckdir) {
    TrainerState st = {0};
    char p[1300];
    if (ckdir && ckdir[0]) {
        snprintf(p, sizeof p, "%s/trainer_state.json", ckdir);
        if (read_trainer_state(p, &st)) return -1;
    }
    put_int(d, "resumed step", st.step); put_int(d, "resumed adam_t", st.adam_t);
    put_int(d, "resumed run's steps", st.steps); put_int(d, "resumed seed", (int64_t)st.seed);
    put_int(d, "resumed data_order", st.sequential);
    return 0;
}

static void format_value(const Digest *d, int f, uint64_t v, char *buf, size_t n) {
    int64_t i; double x;
    switch (d->info[f].kind) {
    case K_INT: memcpy(&i, &v, 8); snprintf(buf, n, "%lld", (long long)i); break;
    default: memcpy(&x, &v, 8); snprintf(buf, n, "%.9g", x); break;
    }
}

int agree_run(const Config *c, const char *ckdir) {
    Digest d = {0};
    digest_config(&d, c);
    int bad = digest_state(&d, ckdir);
    if (ted_agree(bad)) return 1;
    if (comm_world_size() == 1) return 0;
    Group world = {GROUP_WORLD, comm_world_size(), comm_world_rank(), MPI_COMM_WORLD, NULL};   // no topology yet
    int P = world.size;
    uint64_t *all = ted_alloc(sizeof(uint64_t) * AGREE_MAX * P, MEM_TEMP);
    comm_allgather(&world, d.v, all, AGREE_MAX, DT_I64);
    int rank = -1, field = -1;
    for (int r = 1; r < P && rank < 0; r++)
        for (int f = 0; f < d.n && rank < 0; f++)
            if (all[(size_t)r * AGREE_MAX + f] != all[f]) { rank = r; field = f; }
    if (rank >= 0 && world.rank == 0) {
        char a[64], b[64];
        format_value(&d, field, all[field], a, sizeof a);
        format_value(&d, field, all[(size_t)rank * AGREE_MAX + field], b, sizeof b);
        fprintf(stderr, "ted: ranks disagree on %s: rank 0 has %s, rank %d has %s (every rank must be given the same "
                "settings and checkpoint)\n", d.info[field].name, a, rank, b);
        fflush(stderr);
    }
    ted_free(all);
    return rank >= 0;
}
