// rmsnorm.c — RMSNorm forward and backward (see rmsnorm.h).
#include "nn/rmsnorm.h"
#include <math.h>
#include <omp.h>

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, long N, int d, float eps) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *x = inp + i * d;
        double ss = 0;
        for (int c = 0; c < d; c++) ss += (double)x[c] * x[c];
        float s = (float)(1.0 / sqrt(ss / d + eps));
        rstd[i] = s;
        for (int c = 0; c < d; c++) out[i * d + c] = x[c] * s * w[c];
    }
}

// y = x·s·w with s = (mean x² + eps)^(−1/2): dx = s·(g⊙w) − x·s³·mean(g⊙w⊙x)
void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                      long N, int d) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *g = dout + i * d, *x = inp + i * d;
        float s = rstd[i], dot = 0;
        for (int c = 0; c < d; c++) dot += g[c] * w[c] * x[c];
        float k = dot / d * s * s * s;
        for (int c = 0; c < d; c++) dinp[i * d + c] += g[c] * w[c] * s - x[c] * k;
    }
    #pragma omp parallel
    {   // the weight's gradient: threads split the columns, rows summed in order
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = d * id / nt, c1 = d * (id + 1) / nt;
        for (long i = 0; i < N; i++)
            for (int c = c0; c < c1; c++) dw[c] += dout[i * d + c] * inp[i * d + c] * rstd[i];
    }
}
