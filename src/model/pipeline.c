// pipeline.c — the schedule's instructions carried out on this rank (see pipeline.h).
#include "model/pipeline.h"
#include "core/alloc.h"
#include "parallel/comm.h"
#include "core/half.h"
#include "core/util.h"
#include "core/watchdog.h"
#include <string.h>

enum { TAG_ACT, TAG_GRAD, TAG_EVAL };
static int tag_of(const Pipeline *P, int kind, int chunk) { return kind * P->M->chunks + chunk; }
static int stage_of(const Pipeline *P, int chunk) { return chunk % P->M->topo->pp; }
static int local_of(const Pipeline *P, int chunk) { return chunk / P->M->topo->pp; }

void pipe_init(Pipeline *P, Model *M, const Config *c) {
    memset(P, 0, sizeof *P);
    P->M = M;
    P->pp = (Group *)&M->topo->g[GROUP_PP];
    P->half = M->reg.half;
    sched_build(&P->sched, c->pp_schedule, M->topo->pp, c->pp_virtual, c->grad_accum, M->topo->stage);
    long N = (long)M->Bmax * M->T;
    P->inp = ted_alloc(sizeof(int) * N, MEM_TEMP);
    P->tgt = ted_alloc(sizeof(int) * N, MEM_TEMP);
    if (M->topo->pp > 1) {
        P->recv_buf = ted_alloc(sizeof(float) * N * M->d, MEM_COMM);
        if (ted_device != DEV_CPU) P->host_f32 = ted_alloc(sizeof(float) * N * M->d, MEM_COMM);
    }
}

static void wait_sends(Pipeline *P) {
    for (int i = 0; i < P->nsends; i++) comm_wait(&P->sends[i].req);
}

void pipe_free(Pipeline *P) {
    wait_sends(P);
    for (int i = 0; i < P->nsends; i++) ted_free(P->sends[i].buf);
    ted_free(P->sends); ted_free(P->recv_buf); ted_free(P->host_f32); ted_free(P->inp); ted_free(P->tgt);
    sched_free(&P->sched);
    memset(P, 0, sizeof *P);
}

// A send buffer whose last send is done (or a new one): sends in flight keep theirs.
static PipeSend *free_send(Pipeline *P, size_t bytes) {
    for (int i = 0; i < P->nsends; i++)
        if (P->sends[i].cap >= bytes && comm_test(&P->sends[i].req)) return &P->sends[i];
    P->sends = ted_realloc(P->sends, sizeof(PipeSend) * (P->nsends + 1), MEM_TEMP);
    PipeSend *s = &P->sends[P->nsends++];
    s->buf = ted_alloc(bytes, MEM_COMM);
    s->cap = bytes;
    s->req = MPI_REQUEST_NULL;
    return s;
}

// Starts sending n floats of x (host or device) to stage `to`, in the message type of the run.
static void send_floats(Pipeline *P, const float *x, long n, int to, int tag) {
    size_t es = P->half ? 2 : 4;
    PipeSend *s = free_send(P, es * n);
    const float *h = buf_to_host(P->host_f32, x, sizeof(float) * n);
    if (P->half) {
        uint16_t *o = s->buf;
        for (long j = 0; j < n; j++) o[j] = half_from_f32(P->half, h[j]);
    } else memcpy(s->buf, h, sizeof(float) * n);
    comm_isend(P->pp, s->buf, n, comm_dtype(P->half), to, tag, &s->req);
}

// Receives n floats from stage `from` into x (host or device); the wait is counted in wait_ms.
static void recv_floats(Pipeline *P, float *x, long n, int from, int tag) {
    double t0 = now_ms();
    comm_recv(P->pp, P->recv_buf, n, comm_dtype(P->half), from, tag);
    P->wait_ms += now_ms() - t0;
    float *dst = ted_device == DEV_CPU ? x : P->host_f32;
    if (P->half) {
        const uint16_t *in = P->recv_buf;
        for (long j = 0; j < n; j++) dst[j] = half_to_f32(P->half, in[j]);
    } else memcpy(dst, P->recv_buf, sizeof(float) * n);
    if (dst != x) buf_copy(x, dst, sizeof(float) * n);
}

// TED_PP_TRACE=PREFIX: the first step's instructions, as run, into PREFIX.<rank> (tests).
static FILE *open_trace(const Pipeline *P) {
    const char *prefix = getenv("TED_PP_TRACE");
    if (!prefix || P->steps_run) return NULL;
    char path[1100];
    snprintf(path, sizeof path, "%s.%d", prefix, P->M->topo->rank);
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "stage %d pp %d v %d m %d %s\n", P->sched.stage, P->sched.pp, P->sched.v, P->sched.m,
                   sched_name(P->sched.kind));
    return f;
}

// One instruction of a training step.
static double run_instr(Pipeline *P, const PipeInstr *in, PipeBatchFn batch, void *ctx, const float scale[3]) {
    Model *M = P->M;
    int i = local_of(P, in->chunk), slot = in->mb % M->ch_slots[i], B = M->Bmax, T = M->T;
    long n = (long)B * T * M->d;
    switch (in->op) {
    case PIPE_RECV_ACT:
        recv_floats(P, model_chunk_input(M, i, slot), n, stage_of(P, in->chunk - 1), tag_of(P, TAG_ACT, in->chunk));
        return 0;
    case PIPE_FORWARD: {
        mem_set_phase(PHASE_FORWARD);
        watchdog_step(P->step, in->mb);
        if (in->chunk == 0 || in->chunk == M->chunks - 1) batch(ctx, in->mb, P->inp, P->tgt);
        M->seq0 = (long)in->mb * B * M->topo->dp + (long)M->topo->dp_idx * B;   // its first global sequence
        double loss = model_forward_chunk(M, i, slot, P->inp, P->tgt, B, T);
        if (P->after_forward) P->after_forward(P->hook_ctx);
        return loss;
    }
    case PIPE_SEND_ACT:
        send_floats(P, model_chunk_output(M, i, slot), n, stage_of(P, in->chunk + 1), tag_of(P, TAG_ACT, in->chunk + 1));
        return 0;
    case PIPE_RECV_GRAD:
        recv_floats(P, M->dres, n, stage_of(P, in->chunk + 1), tag_of(P, TAG_GRAD, in->chunk));
        return 0;
    case PIPE_BACKWARD:
        mem_set_phase(PHASE_BACKWARD);
        watchdog_step(P->step, in->mb);
        model_backward_chunk(M, i, slot, scale[0], scale[1], scale[2]);
        return 0;
    case PIPE_SEND_GRAD:
        send_floats(P, M->dres, n, stage_of(P, in->chunk - 1), tag_of(P, TAG_GRAD, in->chunk - 1));
        return 0;
    }
    return 0;
}

double pipe_train_step(Pipeline *P, PipeBatchFn batch, void *ctx, float lm_scale, float aux_scale, float z_scale) {
    static const char *names[] = {"recv-act", "F", "send-act", "recv-grad", "B", "send-grad"};
    const float scale[3] = {lm_scale, aux_scale, z_scale};
    FILE *trace = open_trace(P);
    double loss = 0;
    P->wait_ms = 0;
    P->M->ce_scale = lm_scale;   // the head's forward writes the loss gradient (model.c: fused_loss)
    for (int k = 0; k < P->sched.n; k++) {
        const PipeInstr *in = &P->sched.ins[k];
        loss += run_instr(P, in, batch, ctx, scale);
        if (trace) fprintf(trace, "%s %d %d\n", names[in->op], in->mb, in->chunk);
    }
    wait_sends(P);
    P->M->ce_scale = 0;
    if (trace) fclose(trace);
    P->steps_run++;
    return loss;
}

double pipe_forward(Pipeline *P, const int *tokens, const int *targets, int B, int T) {
    Model *M = P->M;
    long n = (long)B * T * M->d;
    double loss = 0;
    for (int i = 0; i < M->nch; i++) {
        int c = M->ch_id[i];
        if (c > 0) recv_floats(P, model_chunk_input(M, i, 0), n, stage_of(P, c - 1), tag_of(P, TAG_EVAL, c));
        loss += model_forward_chunk(M, i, 0, tokens, targets, B, T);
        if (c < M->chunks - 1) send_floats(P, model_chunk_output(M, i, 0), n, stage_of(P, c + 1), tag_of(P, TAG_EVAL, c + 1));
    }
    wait_sends(P);
    if (P->pp->size > 1) {   // the head's stage has the result
        int root = stage_of(P, M->chunks - 1);
        if (targets) comm_broadcast(P->pp, &loss, 1, DT_F64, root);
        else comm_broadcast(P->pp, M->full_logits, (long)B * T * M->V, DT_F32, root);
    }
    return loss;
}

void pipe_sum_tied(Pipeline *P) {
    Model *M = P->M;
    if (P->pp->size == 1 || M->wte < 0 || !M->m.tie_word_embeddings) return;   // one stage; a middle stage; untied
    Param *p = &M->reg.p[M->wte];
    size_t es = M->reg.ghalf ? 2 : 4, bytes = es * p->numel;
    int peer = M->has_embed ? P->pp->size - 1 : 0, tag = tag_of(P, TAG_EVAL + 1, 0);
    DType t = comm_dtype(M->reg.ghalf);
    void *g = M->reg.ghalf ? (void *)p->g16 : (void *)p->g;
    char *mine = ted_alloc(bytes, MEM_COMM), *theirs = ted_alloc(bytes, MEM_COMM);
    buf_copy(mine, g, bytes);
    MPI_Request req;
    comm_isend(P->pp, mine, p->numel, t, peer, tag, &req);
    comm_recv(P->pp, theirs, p->numel, t, peer, tag);
    comm_wait(&req);
    for (long j = 0; j < p->numel; j++) {   // the same sum on both stages: a + b = b + a in fp32
        if (M->reg.ghalf) {
            uint16_t *a = (uint16_t *)mine + j, b = ((uint16_t *)theirs)[j];
            *a = half_from_f32(M->reg.ghalf, half_to_f32(M->reg.ghalf, *a) + half_to_f32(M->reg.ghalf, b));
        } else ((float *)mine)[j] += ((float *)theirs)[j];
    }
    buf_copy(g, mine, bytes);
    ted_free(mine); ted_free(theirs);
}

void pipe_print(const Pipeline *P, const Config *c) {
    const Model *M = P->M;
    if (M->topo->rank) return;
    int pp = M->topo->pp, l0[MAX_CHUNKS * 8 + 1];
    size_t held = 0;
    int views = 0;
    for (int i = 0; i < M->nch; i++) { held += M->ch_bytes[i] * M->ch_slots[i]; views += M->ch_slots[i]; }
    if (pp == 1 && c->pp_schedule == PP_1F1B) {   // no pipeline: one line, the activations held
        printf("activations: %d view(s) held (micro-batch x chunk), %zu bytes, + %zu in compute buffers the views share "
               "(the memory line below counts every buffer)\n", views, held, M->shared_act_bytes);
        return;
    }
    sched_chunks(M->L, M->chunks, c->pp_nlayers ? c->pp_layers : NULL, l0);
    printf("pipeline: pp %d, %s schedule, %d chunk(s) per stage, %d micro-batches per step; ideal bubble %.3f\n",
           pp, sched_name(c->pp_schedule), P->sched.v, c->grad_accum,
           sched_ideal_bubble(c->pp_schedule, pp, P->sched.v, c->grad_accum));
    int T = cfg_seq_len(c);
    for (int s = 0; s < pp && pp > 1; s++) {   // with each stage's model FLOPs per token (forward and backward)
        double flops = s == (M->chunks - 1) % pp ? 6.0 * c->model.vocab_size * c->model.n_embd : 0;
        printf("  stage %d (ranks %d-%d): blocks", s, s * M->topo->dp * M->topo->tp, (s + 1) * M->topo->dp * M->topo->tp - 1);
        for (int ch = s; ch < M->chunks; ch += pp) {
            printf(" %d-%d", l0[ch], l0[ch + 1] - 1);
            for (int l = l0[ch]; l < l0[ch + 1]; l++) flops += model_block_flops_per_token(&c->model, T, l);
        }
        printf("%s%s, %.4g GFLOP per token\n", s == 0 ? " + embedding" : "", s == (M->chunks - 1) % pp ? " + head" : "",
               flops / 1e9);
    }
    printf("pipeline: stage 0 holds %d activation view(s) (micro-batch x chunk): %zu bytes, + %zu in compute buffers "
           "the views share\n", views, held, M->shared_act_bytes);
}
