// compare.h — `ted compare A.jsonl B.jsonl`: the first step, and in it the first value, where
// two training logs part — the step's losses, each MoE block's tokens per expert, then each
// tensor's gradient norm (--log-tensors lines), in the order of A. Exit 0: no divergence
// within the tolerance; 1: they part (one line says where); 2: bad input.
#pragma once

int compare_main(int argc, char **argv);
