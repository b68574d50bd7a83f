// evaluate.c — the loss over a split's windows (see evaluate.h).
#include "run/evaluate.h"
#include "core/alloc.h"
#include "run/trainer.h"

// The loss sums of one forward over B windows from first (0 when B = 0: the rank has no window
// left but runs a forward of one, since every rank runs the same collectives).
static void eval_batch(Pipeline *P, const Split *s, long first, int B, int T, int *inp, int *tgt, double *sums) {
    Model *M = P->M;
    int counted = B > 0, nmoe = trainer_moe_blocks(&M->m);
    if (!counted) B = 1;
    for (int j = 0; j < B; j++) data_window(s, counted ? first + j : 0, T, inp + j * T, tgt + j * T);
    RouterStats before = M->rstats;
    double lm = pipe_forward(P, inp, tgt, B, T);
    if (!counted) return;
    sums[0] += lm;
    sums[1] += M->rstats.aux_sum - before.aux_sum;
    sums[2] += M->rstats.z_sum - before.z_sum;
    sums[3] += nmoe ? (double)(M->rstats.groups - before.groups) / nmoe : 0;
    sums[4] += M->rstats.cv_sum - before.cv_sum;
}

EvalResult evaluate(Pipeline *P, const Split *s, long nwin, int T, Ticker *tk) {
    Model *M = P->M;
    const Topology *tp = M->topo;
    int mb = M->Bmax;
    long per = (long)mb * tp->dp, nb = (nwin + per - 1) / per;
    int *inp = ted_alloc(sizeof(int) * mb * T, MEM_TEMP), *tgt = ted_alloc(sizeof(int) * mb * T, MEM_TEMP);
    double sums[5] = {0, 0, 0, 0, 0};   // lm, aux (Σ l_aux), z (Σ lse²), groups (per MoE layer), noisy_topk CV² terms
    M->uneven = 1;                      // the last batch may differ between ranks: expert counts travel
    for (long b = 0; b < nb; b++) {
        long first = b * per + (long)tp->dp_idx * mb;
        int B = (int)(nwin - first < mb ? nwin - first : mb);
        eval_batch(P, s, first, B > 0 ? B : 0, T, inp, tgt, sums);
        if (tk && B > 0) ticker_update(tk, (double)(first + B));
    }
    M->uneven = 0;
    comm_allreduce((Group *)&tp->g[GROUP_DP], sums, 5, DT_F64);
    // the router statistics are on the stages with MoE blocks; the loss, on every stage, is counted once
    if (tp->stage) sums[0] = 0;
    comm_allreduce((Group *)&tp->g[GROUP_PP], sums, 5, DT_F64);
    ted_free(inp);
    ted_free(tgt);
    double ntok = (double)nwin * T;
    EvalResult r = {0, sums[0] / ntok, 0, nwin};
    if (trainer_moe_blocks(&M->m))
        r.aux = M->m.aux_coef * sums[1] / sums[3] + M->m.z_coef * sums[2] / ntok + sums[4] / sums[3];
    r.loss = r.lm + r.aux;
    return r;
}
