// dispatcher.c — gather by expert, weighted scatter-back (see dispatcher.h).
#include "dispatcher.h"
#include <string.h>

void dispatch_plan(int *row, long *exp_off, long *start, const int *choice, const int *slot, const int *kept,
                   long N, int k, int E, int group_tokens) {
    int G = (int)((N + group_tokens - 1) / group_tokens);
    long r = 0;   // start[g][e]: first row of (group g, expert e)
    for (int e = 0; e < E; e++) {
        exp_off[e] = r;
        for (int g = 0; g < G; g++) { start[(long)g * E + e] = r; r += kept[(long)g * E + e]; }
    }
    exp_off[E] = r;
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++) {
        long g = t / group_tokens;
        for (int j = 0; j < k; j++) {
            int s = slot[t * k + j];
            row[t * k + j] = s < 0 ? -1 : (int)(start[g * E + choice[t * k + j]] + s);
        }
    }
}

void dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            if (row[t * k + j] >= 0) memcpy(xin + (long)row[t * k + j] * d, x + t * d, sizeof(float) * d);
}

void dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            if (row[t * k + j] < 0) continue;
            const float *s = dxin + (long)row[t * k + j] * d;
            float *o = dx + t * d;
            for (int c = 0; c < d; c++) o[c] += s[c];
        }
}

void combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            if (row[t * k + j] < 0) continue;
            const float *s = y + (long)row[t * k + j] * d;
            float g = gate[t * k + j], *o = out + t * d;
            for (int c = 0; c < d; c++) o[c] += g * s[c];
        }
}

void combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                      const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int r = row[t * k + j];
            dgate[t * k + j] = 0;
            if (r < 0) continue;
            const float *go = dout + t * d, *yr = y + (long)r * d;
            float g = gate[t * k + j], dot = 0, *dr = dy + (long)r * d;
            for (int c = 0; c < d; c++) { dr[c] = g * go[c]; dot += yr[c] * go[c]; }
            dgate[t * k + j] = dot;
        }
}
