// test_mfu.c — the FLOPs MFU counts, against the formula worked by hand for a small model:
// V 16, d 8, f 32, L 2, E 4, top-2, moe_every 2 (block 1 is MoE), T 4.
//   active matmul parameters: LM head V·d = 128; block 0 (dense): 4d² + 2df = 256 + 512;
//   block 1 (MoE): 4d² + router d·E + k·2df = 256 + 32 + 1024; total 2208.
//   FLOPs per token = 6·2208 + 12·L·T·d = 13248 + 768 = 14016.
// A dropped choice skips its expert: with half the choices dropped, 6·k·2df·0.5 = 3072 fewer.
#include "model/mfu.h"
#include <math.h>
#include <stdio.h>
#include "harness.h"

static void expect(const char *what, double got, double want) { expect_near(what, got, want, 1e-9); }

int main(void) {
    Config c;
    config_defaults(&c);
    ModelConfig *m = &c.model;
    m->vocab_size = 16; m->n_embd = 8; m->n_inner = 32; m->n_layer = 2; m->n_head = 2;
    m->num_experts = 4; m->top_k = 2; m->moe_every = 2;
    expect("no drops", mfu_flops_per_token(m, 4, 0.0), 14016);
    expect("half the choices dropped", mfu_flops_per_token(m, 4, 0.5), 14016 - 3072);
    expect("every choice dropped", mfu_flops_per_token(m, 4, 1.0), 14016 - 6144);
    m->num_experts = 1;   // dense: block 1 is dense too, nothing to drop
    expect("dense", mfu_flops_per_token(m, 4, 0.5), 6 * (128 + 2 * 768) + 768);
    return test_exit("test_mfu");
}
