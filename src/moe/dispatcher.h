// dispatcher.h — moves tokens between the token order [N,d] and the expert buffer [R,d],
// whose rows are grouped by expert, then routing group, then slot. Kept choices only:
// a dropped choice has row -1 and contributes nothing. (With expert parallelism the
// expert buffer is what the all-to-all exchanges.)
#pragma once
#include "parallel/comm.h"
#include "moe/router.h"

// The token-side expert buffer: rows grouped by global expert, then routing group, then slot.
// padded (capacity mode with an all-to-all to feed): every (expert, group) has C_g rows whether
// used or not — fixed-size buffers, unused rows zero. Otherwise only the kept rows. Fills
// row[N,k], exp_rows[E] (rows per expert) and start[G,E] (first row of each (group, expert)).
// Each expert's rows are rounded up to a multiple of `multiple` (tp under DTD, else 1). On a GPU
// run row, choice, slot and kept are device buffers and exp_rows the host's (moe_cuda.h).
void dispatch_plan(int *row, long *exp_rows, long *start, const int *choice, const int *slot, const int *kept,
                   long N, int k, const RouterCfg *c, int padded, int multiple);

// Expert parallelism: the token side of this rank ↔ the expert side, where the rows of each
// local expert from every rank of the EP group are contiguous (one GEMM per local expert).
typedef struct {
    Group *ep;
    Group *tp;      // with dtd: the TP group that shares the tokens
    int dtd;        // duplicate token dropping: 1/tp of the rows travel, TP puts them together
    int E, El;
    long *scnt;     // [E] rows sent to each global expert (with dtd: this TP rank's share)
    long *rcnt;     // [ep][El] rows received from each source for each local expert (likewise)
    long *exp_off;  // [El+1] expert-side first row of each local expert
    long Rs, Rr;    // token-side and expert-side rows
} Exchange;
// known_sizes: every rank's exp_rows are the same (capacity mode, equal batches), so no
// counts need to travel; otherwise the counts go first (an all-to-all of El integers).
void exchange_plan(Exchange *x, const long *exp_rows, int known_sizes);
// buf is a scratch of 2·max(Rs, Rr)·d floats. Without dtd, exchange_to_tokens moves the expert
// side as it is (the caller has summed it over TP); with dtd it sums it over TP itself
// (a reduce-scatter), and both directions end with full rows on every TP rank.
// The all-to-all's counts in elements of rows of d floats (bf16 rows of an even d travel as rows
// of d/2 floats: the exchange copies bytes): per destination (sc, sd) and per source (rc, rd).
void exchange_counts(const Exchange *x, int d, long *sc, long *sd, long *rc, long *rd);
void exchange_to_experts(Exchange *x, const float *tok_side, float *buf, float *exp_side, int d);
// t: what the rows hold, for DTD's sum of the expert shards on the way back (DT_BF16: bf16 rows of
// d floats, two values to a float)
void exchange_to_tokens(Exchange *x, const float *exp_side, float *buf, float *tok_side, int d, DType t);

// xin[row] = x[t]; half: x's and xin's rows are bf16, d to a row from the first byte (a --bf16 GPU
// run's ln2 and expert input, MoeLayer.rows16: copied as they are; d even)
void dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d, int half);
// dx[t] += Σ_j dxin[row_j] (half: dxin's rows are bf16, d to a row from the first byte)
void dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d, int half);
// out[t] += Σ_j gate_j · y[row_j] (y16: y's rows are bf16, d to a row: MoeLayer.out16)
void combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d, int y16);
// dy[row_j] = gate_j · dout[t]; dgate_j = y[row_j]·dout[t] (0 when dropped). half: dy's rows are
// written in bf16, d to a row from the first byte (MoeLayer.rows16: the experts read them so); y16:
// y's rows are bf16 (as combine_forward's)
void combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                      const int *row, long N, int k, int d, int half, int y16);
