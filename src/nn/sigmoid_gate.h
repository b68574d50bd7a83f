// sigmoid_gate.h — a row gate y_t ← sigmoid(x_t·w)·y_t with w [1, d] (nn.Linear(d, 1, bias=False)):
// Qwen2-MoE's shared_expert_gate on the shared expert's output (docs/llama.md). The backward
// comes in two halves around the gated branch's own backward, which runs on the scaled gradient.
#pragma once

// y[N,d] *= sigmoid(x[N,d]·w), row by row.
void sigmoid_gate_forward(float *y, const float *x, const float *w, long N, int d);
// On entry q[t] = dy_t·y_t (the ungated output y, summed over any split of it). Writes
// dys[N,d] = sigmoid_t·dy (the gradient of y; may alias dy) and leaves in q[t] the gradient of
// the gate's logit, sigmoid'·q.
void sigmoid_gate_backward_y(float *dys, float *q, const float *dy, const float *x, const float *w, long N, int d);
// From the logit gradients ds[N]: dx[N,d] += ds_t·w, dw[d] += Σ_t ds_t·x_t.
void sigmoid_gate_backward_x(float *dx, float *dw, const float *ds, const float *x, const float *w, long N, int d);
// q[t] = a_t·b_t over rows of width d.
void rows_dot(float *q, const float *a, const float *b, long N, int d);
