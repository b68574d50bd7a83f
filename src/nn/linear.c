// linear.c — nn.Linear-layout matrix products through the one sgemm (see linear.h).
#include "nn/linear.h"
#include "core/backend.h"
#include "nn/ops.h"
#include "nn/ops_cuda.h"

void linear_forward(float *out, long ldo, const float *inp, long ldi, const float *w, long N, int C, int OC,
                    int accumulate) {
    if (N == 0) return;
    ON_GPU(cu_linear_forward(out, ldo, inp, ldi, w, N, C, OC, accumulate));
    gemm(0, 1, (int)N, OC, C, 1.0f, inp, (int)ldi, w, C, accumulate ? 1.0f : 0.0f, out, (int)ldo);
}

void linear_backward(float *dinp, long ldd, float *dw, const float *dout, long ldo, const float *inp, long ldi,
                     const float *w, long N, int C, int OC, int accumulate) {
    if (N == 0) return;
    ON_GPU(cu_linear_backward(dinp, ldd, dw, dout, ldo, inp, ldi, w, N, C, OC, accumulate));
    if (dinp) gemm(0, 0, (int)N, C, OC, 1.0f, dout, (int)ldo, w, C, accumulate ? 1.0f : 0.0f, dinp, (int)ldd);
    if (dw) gemm(1, 0, OC, C, (int)N, 1.0f, dout, (int)ldo, inp, (int)ldi, 1.0f, dw, C);
}

void linear_bias_forward(float *out, long ldo, const float *b, long N, int OC) {
#pragma omp parallel for
    for (long t = 0; t < N; t++)
        for (int o = 0; o < OC; o++) out[t * ldo + o] += b[o];
}

void linear_bias_backward(float *db, const float *dout, long ldo, long N, int OC) {
#pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        float s = 0;
        for (long t = 0; t < N; t++) s += dout[t * ldo + o];
        db[o] += s;
    }
}

void head_loss_forward(float *losses, float *logits, float *stats, const float *inp, int inp16, const float *w,
                       const int *targets, long N, int C, int V, int Vl, float scale) {
    ON_GPU(cu_head_loss_forward(losses, logits, inp, inp16, w, targets, N, C, V, Vl, scale));
    linear_forward(logits, Vl, inp, C, w, N, C, Vl, 0);
    crossentropy_fused(losses, logits, stats, targets, N, V, Vl, scale);
}

void head_loss_backward(float *dinp, float *dw, const float *dlogits, const float *inp, int inp16, const float *w,
                        long N, int C, int Vl) {
    ON_GPU(cu_head_loss_backward(dinp, dw, dlogits, inp, inp16, w, N, C, Vl));
    linear_backward(dinp, C, dw, dlogits, Vl, inp, C, w, N, C, Vl, 0);
}
