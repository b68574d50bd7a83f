// experts.h — the experts a rank owns, run as one batched pass over the expert buffer:
// for each local expert e, rows [off[e], off[e+1]) go through c_fc → GELU → c_proj.
// Weights of the local experts are contiguous: wfc [El][d,f], bfc [El][f], wproj [El][f,d],
// bproj [El][d] (f is this rank's share under TP).
#pragma once

typedef struct {
    int El, d, f;
    float *wfc, *bfc, *wproj, *bproj;       // weights
    float *gwfc, *gbfc, *gwproj, *gbproj;   // their gradients
} Experts;

// h[R,f] pre-activation, hg[R,f] GELU(h), y[R,d]. proj_bias 0 leaves out c_proj's bias
// (a row-parallel layer adds it once, after the TP reduction).
void experts_forward(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off,
                     int proj_bias);
// dxin[R,d] written; dhg[R,f] scratch; parameter gradients accumulate.
void experts_backward(const Experts *x, float *dxin, float *dhg, const float *dy, const float *xin,
                      const float *h, const float *hg, const long *off, int proj_bias);
