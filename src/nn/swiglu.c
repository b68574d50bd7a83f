// swiglu.c — the SwiGLU activation and its backward (see swiglu.h).
#include "nn/swiglu.h"
#include <math.h>

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void swiglu_forward(float *hg, const float *h, long R, int f) {
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < R; r++)
        for (int j = 0; j < f; j++) {
            float g = h[r * 2 * f + j], u = h[r * 2 * f + f + j];
            hg[r * f + j] = g * sigmoidf_(g) * u;
        }
}

void swiglu_backward(float *dh, const float *h, long R, int f) {
    for (long r = R - 1; r >= 0; r--) {
        const float *src = dh + r * f, *hr = h + r * 2 * f;
        float *dst = dh + r * 2 * f;
        for (int j = 0; j < f; j++) {
            float dv = src[j], g = hr[j], u = hr[f + j], s = sigmoidf_(g);
            dst[f + j] = dv * g * s;                       // d up
            dst[j] = dv * u * s * (1.0f + g * (1.0f - s)); // d gate
        }
    }
}
