// rope.c — rotary position embeddings (see rope.h).
#include "nn/rope.h"
#include <math.h>

void rope_table(float *tab, int T, int hd, float theta) {
    int h2 = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < h2; i++) {
            double inv = pow((double)theta, -2.0 * i / hd), a = t * inv;
            tab[(long)t * hd + i] = (float)cos(a);
            tab[(long)t * hd + h2 + i] = (float)sin(a);
        }
}

// (x1, x2) → (x1·c − x2·s, x2·c + x1·s); sign −1 turns back.
static void rotate(float *x, long ld, long N, int T, int nh, int hd, const float *tab, float sign) {
    int h2 = hd / 2;
    #pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *cs = tab + (n % T) * hd, *sn = cs + h2;
        for (int h = 0; h < nh; h++) {
            float *a = x + n * ld + (long)h * hd, *b = a + h2;
            for (int i = 0; i < h2; i++) {
                float c = cs[i], s = sign * sn[i], x1 = a[i], x2 = b[i];
                a[i] = x1 * c - x2 * s;
                b[i] = x2 * c + x1 * s;
            }
        }
    }
}

void rope_forward(float *x, long ld, long N, int T, int nh, int hd, const float *tab) {
    rotate(x, ld, N, T, nh, hd, tab, 1.0f);
}

void rope_backward(float *dx, long ld, long N, int T, int nh, int hd, const float *tab) {
    rotate(dx, ld, N, T, nh, hd, tab, -1.0f);
}
