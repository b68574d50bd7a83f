// test_sparse_model.c — block-sparse attention inside the model (design):
//  (a) a layout with every causal block present (variable, one local window over the whole
//      sequence) gives the dense model's loss and gradients within 1e-5;
//  (b) generation: a forward over the first 40 tokens (a partial last block) gives the logits of
//      the first 40 positions of the full 64-token forward (the layout's leading blocks);
//  (c) a sparse layout changes the model's output (the layout is really used).
#include "core/alloc.h"
#include "model/model.h"
#include "core/rng.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int failures = 0, passes = 0;
static void expect(int ok, const char *what, double v) {
    printf("%-66s %.2e  %s\n", what, v, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}

enum { T = 64, B = 2, V = 64 };

static void build(Model *M, Topology *topo, int mode) {
    Config c;
    config_defaults(&c);
    ModelConfig *m = &c.model;
    m->vocab_size = V; m->n_positions = T; m->n_embd = 32; m->n_layer = 2; m->n_head = 4; m->n_inner = 64;
    c.sparse.mode = mode; c.sparse.block = 16; c.sparse.different_layout_per_head = 1;
    if (mode == SPARSE_VARIABLE) c.sparse.local_window_blocks[0] = T / 16;   // every causal block
    if (mode == SPARSE_BIGBIRD) { c.sparse.num_sliding_window_blocks = 1; c.sparse.num_random_blocks = 1; }
    model_build(M, &c, topo, B, T);
    for (int i = 0; i < M->reg.n; i++) {   // weights larger than the init, so attention is not uniform
        Param *p = &M->reg.p[i];
        for (long j = 0; j < p->numel; j++)
            p->w[j] = (strstr(p->name, "ln_") && strstr(p->name, "weight") ? 1.0f : 0.0f) +
                      (p->ndim == 2 ? 0.3f : 0.1f) * rng_normal(3, (uint64_t)i, (uint64_t)j);
    }
}

static double max_rel(const float *a, const float *b, long n) {
    double d = 0, big = 0;
    for (long i = 0; i < n; i++) { d = fmax(d, fabs(a[i] - b[i])); big = fmax(big, fabs(b[i])); }
    return d / big;
}

int main(void) {
    omp_set_num_threads(2);
    Topology topo;
    topo_init(&topo, 1, 1, 1);
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) { tok[i] = (i * 7 + 3) % V; tgt[i] = (i * 5 + 1) % V; }
    Model D, S;
    build(&D, &topo, SPARSE_DENSE);
    build(&S, &topo, SPARSE_VARIABLE);
    double ld = 0, ls = 0;
    for (int pass = 0; pass < 2; pass++) {   // twice: the backward consumes the sparse probabilities
        model_zero_grad(&D); model_zero_grad(&S);
        ld = model_forward(&D, tok, tgt, B, T); ls = model_forward(&S, tok, tgt, B, T);
        model_backward(&D, 1.0f / (B * T), 0, 0); model_backward(&S, 1.0f / (B * T), 0, 0);
    }
    expect(fabs(ld - ls) <= 1e-5 * fabs(ld), "all causal blocks present = dense: loss", fabs(ld - ls) / fabs(ld));
    expect(max_rel(S.reg.g, D.reg.g, D.reg.total) <= 1e-5, "all causal blocks present = dense: every gradient",
           max_rel(S.reg.g, D.reg.g, D.reg.total));
    model_free(&S);

    build(&S, &topo, SPARSE_BIGBIRD);
    float *full = ted_alloc(sizeof(float) * T * V, MEM_TEMP), *dense = ted_alloc(sizeof(float) * T * V, MEM_TEMP);
    model_forward(&S, tok, NULL, 1, T);
    memcpy(full, S.full_logits, sizeof(float) * T * V);
    model_forward(&S, tok, NULL, 1, 40);
    expect(max_rel(S.full_logits, full, 40L * V) <= 1e-5, "generation: 40 tokens = the first 40 positions of 64",
           max_rel(S.full_logits, full, 40L * V));
    model_forward(&D, tok, NULL, 1, T);
    memcpy(dense, D.full_logits, sizeof(float) * T * V);
    double differ = max_rel(full + 40L * V, dense + 40L * V, 24L * V);
    expect(differ > 1e-3, "bigbird (window 1, 1 random) differs from dense at late positions", differ);
    ted_free(full); ted_free(dense);
    model_free(&S); model_free(&D);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
