// balance.c — the balanced pipeline split (see balance.h).
#include "perf/balance.h"
#include "core/alloc.h"
#include "model/model.h"
#include <math.h>

// best[c][l]: the smallest largest-chunk cost of blocks [0, l) in c chunks; cut[c][l] where the
// last of those chunks starts. Costs are prefix sums; the head rides on the last chunk.
void perf_balance_layers(const ModelConfig *m, int T, int nch, int *layers, double *cost) {
    int L = m->n_layer;
    double *pre = ted_alloc(sizeof(double) * (L + 1), MEM_TEMP), head = 6.0 * m->vocab_size * m->n_embd;
    double *best = ted_alloc(sizeof(double) * (nch + 1) * (L + 1), MEM_TEMP);
    int *cut = ted_alloc(sizeof(int) * (nch + 1) * (L + 1), MEM_TEMP);
    for (int l = 0; l < L; l++) pre[l + 1] = pre[l] + model_block_flops_per_token(m, T, l);
#define B(c, l) best[(c) * (L + 1) + (l)]
    for (int l = 0; l <= L; l++) B(0, l) = l ? INFINITY : 0;
    for (int c = 1; c <= nch; c++)
        for (int l = 0; l <= L; l++) {
            B(c, l) = INFINITY;
            for (int s = c - 1; s < l; s++) {   // the c-th chunk is blocks [s, l): at least one block
                double part = pre[l] - pre[s] + (c == nch && l == L ? head : 0), worst = fmax(B(c - 1, s), part);
                if (worst < B(c, l)) { B(c, l) = worst; cut[c * (L + 1) + l] = s; }
            }
        }
    for (int c = nch, l = L; c >= 1; c--) {
        int s = cut[c * (L + 1) + l];
        layers[c - 1] = l - s;
        if (cost) cost[c - 1] = pre[l] - pre[s] + (c == nch ? head : 0);
        l = s;
    }
#undef B
    ted_free(pre); ted_free(best); ted_free(cut);
}
