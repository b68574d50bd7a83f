// mfu.h — model FLOPs utilization: the FLOPs of the work a step actually did, against a
// stated peak.
#pragma once
#include "config/config.h"
#include "parallel/topology.h"

// The peak of the whole run in FLOP/s and what it is: --peak-tflops (given, per process), a
// GPU's datasheet bf16 rate, or the GEMM rate measured here ("sgemm"; "bf16 gemm" under bf16
// compute, nn/gemm.h) — best of several tries spread over a short time, taken by rank 0 while the
// others wait, scaled to the cores the ranks of a node share — and never below those cores times
// one core's rate (one thread, by CPU time, best of four: "2 cores x one core's sgemm"), which a
// busy machine at start-up cannot lower. `what` names the source.
double mfu_peak_flops(const Config *c, const Topology *tp, const char **what);
// Measured GEMM peak of this machine (FLOP/s), best of a few n³ products on the engine of the
// run's compute mode (fp32: the sgemm rate; bf16 compute: the bf16 GEMM's).
double sgemm_peak_flops(int n, int reps);
// One core's GEMM peak by CPU time (FLOPs per core-second, rank 0's, broadcast): the
// denominator of MFU by CPU time, which other jobs on the cores inflate far less than the wall.
double mfu_core_peak_flops(const Topology *tp);
// Model FLOPs per token of one training step (forward + backward) counting only the expert
// work that was done: a dropped choice skips its expert FFN.
double mfu_flops_per_token(const ModelConfig *m, int T, double dropped_frac);
