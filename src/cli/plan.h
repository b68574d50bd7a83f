// plan.h — the memory model of design §5 (M1, M2): model-state bytes per GPU under TED with
// ZeRO-1, and the largest base model that fits.
#pragma once

// M1: bytes of model state per GPU for np_nonexp / np_exp parameters held per GPU, with
// data-parallel degrees dp (non-expert) and edp (expert); `wbytes` is the size of one weight
// (2 for bf16/fp16: 16-bit weights + 16-bit gradients = 4; 4 for fp32 = 8), plus 12 bytes
// (fp32 master, Adam m, v) sharded over the group.
double plan_state_bytes(double np_nonexp_gpu, double np_exp_gpu, int dp, int edp, int wbytes);
// `ted plan --base-params N --experts E --gpus G [--tp T] [--ep P] [--gpu-mem BYTES] [--precision bf16|fp32]`
int plan_main(int argc, char **argv);
