// resume.c — a run's checkpoints: resuming, --init-from, saving (see run.h).
#include "run/run.h"
#include "core/util.h"
#include "io/agree.h"
#include "io/checkpoint.h"

// Checkpoints read and write the host copies of the weights and the optimizer state.
static void host_view(Model *M, Zero *z, int copy) {
    zero_params_wait(z, 0, M->reg.n);   // overlap_comm: the weights whole before anything reads them
    reg_host_view(&M->reg, copy);
    zero_host_view(z, copy);
}

static void device_view(Model *M, Zero *z, int copy) {
    reg_device_view(&M->reg, copy);
    zero_device_view(z, copy);
}

// A resumed run on another global batch: a warning (the tokens per step and the data each step
// reads change from here). The tokens seen carry on; a checkpoint from before they were kept
// counts its steps at this run's batch.
static void resume_batch(Run *R) {
    TrainerState *st = &R->st;
    long gbatch = R->tr.gbatch;
    if (st->gbatch > 0 && st->gbatch != gbatch && R->topo.rank == 0)
        printf("warning: the checkpoint's run had a global batch of %ld sequences, this run has %ld (micro_batch %d x "
               "gradient_accumulation_steps %d x dp %d): the tokens per step and the data order change from step %ld\n",
               st->gbatch, gbatch, R->c.micro_batch, R->c.grad_accum, R->topo.dp, st->step);
    if (st->tokens < 0) st->tokens = (double)st->step * R->tr.ntok;
    st->gbatch = gbatch;
}

// The resumed trainer state against this run's --steps, --seed and --data-order.
static int check_state(const Run *R) {
    const TrainerState *st = &R->st;
    const Config *c = &R->c;
    if (st->step > c->steps) {
        ted_error("%s: checkpoint is at step %ld, past --steps %d", R->ckdir, st->step, c->steps);
        return -1;
    }
    if (st->step > 0 && (st->seed != c->seed || st->sequential != c->data_sequential)) {
        ted_error("%s: resuming needs the run's --seed %llu and --data-order %s (given %llu, %s)", R->ckdir,
                  (unsigned long long)st->seed, st->sequential ? "sequential" : "shuffled", (unsigned long long)c->seed,
                  c->data_sequential ? "sequential" : "shuffled");
        return -1;
    }
    if (st->step > 0 && st->steps != c->steps && c->sched.type == SCHED_WARMUP_COSINE &&
        R->topo.rank == 0)   // DeepSpeed's: total_num_steps
        printf("note: the checkpoint's run had --steps %ld; with --steps %d the LR schedule changes from here\n",
               st->steps, c->steps);
    return 0;
}

int run_resume(Run *R) {
    Model *M = &R->tr.M;
    Zero *z = &R->tr.z;
    TrainerState *st = &R->st;
    const Config *c = &R->c;
    host_view(M, z, 0);
    int bad = ckpt_load_weights(R->ckdir, M) || ckpt_load_state(R->ckdir, M, z, st);
    if (ted_agree(bad)) return -1;
    device_view(M, z, 1);
    if (!M->reg.half) zero_sync_master(z);
    if (check_state(R)) return -1;
    resume_batch(R);
    st->steps = c->steps;
    st->seed = c->seed;
    st->sequential = c->data_sequential;
    if (R->topo.rank == 0)
        printf("resumed from %s at step %ld (%.0f tokens trained on)\n", R->ckdir, st->step, st->tokens);
    return 0;
}

int run_init_from(Run *R) {
    Model *M = &R->tr.M;
    Zero *z = &R->tr.z;
    host_view(M, z, 0);
    int bad = ckpt_load_weights(R->c.init_from, M) || ckpt_load_masters(R->c.init_from, M, z);
    if (ted_agree(bad)) return -1;
    device_view(M, z, 1);
    if (!M->reg.half) zero_sync_master(z);
    if (R->topo.rank == 0) printf("initialised from %s: its weights, a fresh optimizer, step 0\n", R->c.init_from);
    return 0;
}

int run_save(Run *R) {
    R->st.adam_t = R->tr.z.t;
    host_view(&R->tr.M, &R->tr.z, 1);
    if (ckpt_save(R->c.save, &R->tr.M, &R->tr.z, &R->st)) return -1;
    device_view(&R->tr.M, &R->tr.z, 0);
    R->saved = R->st.step;
    if (R->topo.rank == 0) printf("saved %s/step_%08ld\n", R->c.save, R->st.step);
    return 0;
}
