// fresh.h — gradients that hold no value yet in this step ("fresh": they count as zero).
//
// A GPU step's optimizer marks the gradients it consumed fresh instead of writing zeros over
// them (4 bytes a parameter). The first op of the next backward that writes a fresh gradient
// overwrites it: a weight-gradient GEMM with beta 0, which then does not read it either (another
// 4 bytes a parameter); an op that accumulates (+=) has the fresh part zeroed first. Before
// anything reads the gradients (the tied sums, the reductions, the norm), fresh_settle zeroes
// what no op wrote (an expert that got no tokens, say). The set is host bookkeeping over address
// ranges; nothing is marked on the CPU path, where every call below is a no-op.
//
// TED_FRESH_POISON=1 fills what is marked with a byte pattern (a tiny float) and fresh_settle
// stops the run when a range still fresh no longer holds it: an op wrote or accumulated into a
// fresh gradient without asking here (the emulated GPU tests run so).
#pragma once
#ifdef __cplusplus
extern "C" {   // the CUDA ops ask here too
#endif

void fresh_mark(float *p, long n);              // [p, p + n) is fresh
int fresh_poisoned(void);                       // TED_FRESH_POISON=1: marking writes the pattern
int fresh_whole(const float *p, long n);         // [p, p + n) is wholly fresh
// The beta of a GEMM about to write C = [p, p + n): 0 if wholly fresh (no longer fresh from now
// on), else 1, the fresh parts zeroed first
float fresh_beta(float *p, long n);
void fresh_prepare(float *p, long n);            // [p, p + n) about to be accumulated into: fresh parts zeroed
void fresh_settle(void);                         // every fresh part zeroed; none left
void fresh_reset(void);                          // the set emptied, nothing zeroed (the gradients are freed)
long fresh_spans(void);                          // ranges in the set (tests)
#ifdef __cplusplus
}
#endif
