// swiglu.h — the SwiGLU activation (docs/llama.md): silu(gate)·up, for dense llama FFNs and
// the swiglu experts.
#pragma once

// hg[R,f] = silu(gate)·up from h[R,2f] = gate | up
void swiglu_forward(float *hg, const float *h, long R, int f);
// dh[R,2f] from dhg[R,f], which the caller left in the first R·f floats of dh: expanded in place
// from the last row down (row r's source lies before its destination for r ≥ 1).
void swiglu_backward(float *dh, const float *h, long R, int f);
