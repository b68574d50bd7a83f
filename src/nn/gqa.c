// gqa.c — repeating key/value heads and summing their gradients (see gqa.h).
#include "nn/gqa.h"
#include <string.h>

// Head h takes head h/g; from the last head down, a source (h/g ≤ h) is read before it is written.
void gqa_expand(float *x, long ld, long N, int nh, int nkv, int hd) {
    int g = nh / nkv;
    if (g == 1) return;
    #pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        for (int h = nh - 1; h >= 0; h--)
            if (h / g != h) memcpy(x + n * ld + (long)h * hd, x + n * ld + (long)(h / g) * hd, sizeof(float) * hd);
}

// Head j gets the sum of heads j·g … j·g+g−1, in head order; those lie at or after j, so the
// ascending pass reads every group before any of it is overwritten.
void gqa_reduce(float *dx, long ld, long N, int nh, int nkv, int hd) {
    int g = nh / nkv;
    if (g == 1) return;
    #pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < nkv; j++) {
            float *row = dx + n * ld;
            for (int i = 0; i < hd; i++) {
                float s = 0;
                for (int q = 0; q < g; q++) s += row[(long)(j * g + q) * hd + i];
                row[(long)j * hd + i] = s;
            }
        }
}
