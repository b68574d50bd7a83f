// sigmoid_gate.c — the sigmoid row gate (see sigmoid_gate.h).
#include "nn/sigmoid_gate.h"
#include <math.h>

static float gate_of(const float *x, const float *w, int d) {
    float s = 0;
    for (int i = 0; i < d; i++) s += x[i] * w[i];
    return 1.0f / (1.0f + expf(-s));
}

void sigmoid_gate_forward(float *y, const float *x, const float *w, long N, int d) {
#pragma omp parallel for
    for (long t = 0; t < N; t++) {
        float g = gate_of(x + t * d, w, d);
        for (int i = 0; i < d; i++) y[t * d + i] *= g;
    }
}

void sigmoid_gate_backward_y(float *dys, float *q, const float *dy, const float *x, const float *w, long N, int d) {
#pragma omp parallel for
    for (long t = 0; t < N; t++) {
        float g = gate_of(x + t * d, w, d);
        q[t] *= g * (1.0f - g);
        for (int i = 0; i < d; i++) dys[t * d + i] = g * dy[t * d + i];
    }
}

void sigmoid_gate_backward_x(float *dx, float *dw, const float *ds, const float *x, const float *w, long N, int d) {
#pragma omp parallel for
    for (long t = 0; t < N; t++)
        for (int i = 0; i < d; i++) dx[t * d + i] += ds[t] * w[i];
#pragma omp parallel for
    for (int i = 0; i < d; i++) {
        float s = 0;
        for (long t = 0; t < N; t++) s += ds[t] * x[t * d + i];
        dw[i] += s;
    }
}

void rows_dot(float *q, const float *a, const float *b, long N, int d) {
#pragma omp parallel for
    for (long t = 0; t < N; t++) {
        float s = 0;
        for (int i = 0; i < d; i++) s += a[t * d + i] * b[t * d + i];
        q[t] = s;
    }
}
