// dispatcher.h — moves tokens between the token order [N,d] and the expert buffer [R,d],
// whose rows are grouped by expert, then routing group, then slot. Kept choices only:
// a dropped choice has row -1 and contributes nothing. (With expert parallelism the
// expert buffer is what the all-to-all exchanges.)
#pragma once

// row[N,k] and exp_off[E+1] (first row of each expert; exp_off[E] = R) from the router's
// choices, slots and per-(group, expert) slot counts kept[G,E]; start[G,E] is filled with
// the first row of each (group, expert).
void dispatch_plan(int *row, long *exp_off, long *start, const int *choice, const int *slot, const int *kept,
                   long N, int k, int E, int group_tokens);
// xin[row] = x[t]
void dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d);
// dx[t] += Σ_j dxin[row_j]
void dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d);
// out[t] += Σ_j gate_j · y[row_j]
void combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d);
// dy[row_j] = gate_j · dout[t]; dgate_j = y[row_j]·dout[t] (0 when dropped)
void combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                      const int *row, long N, int k, int d);
