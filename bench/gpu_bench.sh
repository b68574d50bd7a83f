#!/usr/bin/env bash
# ted against eager PyTorch on one GPU, bf16, in one call (about 170 s): d 2048, L 8, 16 heads,
# f 8192, V 50304, T 2048, 8 experts top-2 in every other block, dropless, at
#   MoE 4 K tokens/step   ted micro-batch 2;                PyTorch batch 2
#   dense 4 K tokens/step ted micro-batch 2, one expert;    PyTorch batch 2
#   MoE 16 K tokens/step  ted micro-batch 2, grad-accum 4;  PyTorch batch 8
# and T 8192 at micro-batch 1 (ted only): its device memory peak against `ted plan --config`'s figure;
# then MoE 4 K with GELU by its own passes instead of cuBLASLt's epilogues (TED_LT_GELU=0), with
# AdamW beside the next step's forward (TED_OPT_OVERLAP=1, src/parallel/zero.c), and with the
# experts' GEMM classes timed by the clock (TED_LT_TUNE=1, src/cuda/gemm_lt.cu) after 15 untimed
# steps, which take the timings (these three are extra: their failure fails nothing).
# ted: `ted bench` (2 warm-up + 5 timed steps, the mean) with TED_GPU_PROF=1, and last, if the budget
# leaves time, MoE 4 K again with TED_GPU_PROF=2 (its sites: ops and GEMM shapes; more events, so
# not the run timed, and not needed for the bench to pass); PyTorch:
# bench/torch_bench.py --device cuda (SDPA, fused AdamW, bf16 autocast, router fp32; 3 warm-up + 10
# timed steps, the median; its 8192^3 bf16 matmul rate). MFU by ted's formula against 989.4 TFLOP/s.
# Each run under its own timeout within BENCH_BUDGET seconds (180); logs and table.md under OUT
# (build/gpu_bench). Needs a CUDA build of ted (TED, build/ted) and a python with torch >= 2.
# The table: bench/gpu_table.py OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
TED=${TED:-$PWD/build/ted} OUT=${OUT:-build/gpu_bench} BUDGET=${BENCH_BUDGET:-180}
export TED
# shellcheck source=scripts/gpu_lib.sh
source scripts/gpu_lib.sh
gpu_require gpu_bench
DEADLINE=$((EPOCHSECONDS + BUDGET - 5)) LOGS=$OUT
mkdir -p "$LOGS"
gpu_setup
py=${PYTHON:-python3}
model=(--n-embd 2048 --n-layer 8 --n-head 16 --n-inner 8192 --vocab-size 50304 --top-k 2 --moe-every 2)
moe=(--num-experts 8 --capacity-factor 0)
run_ted() { TED_LT_TUNE=${LT:-0} TED_LT_GELU=${GELU:-1} TED_OPT_OVERLAP=${OV:-0} TED_GPU_PROF=${PROF:-1} step "ted_$1" "$2" \
  "$TED" bench --device cuda --bf16 "${model[@]}" "${@:3}"; }
run_torch() { step "torch_$1" "$2" "$py" bench/torch_bench.py --device cuda --bf16 --peak-tflops 989.4 "${model[@]}" "${@:3}"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader >"$LOGS/card.txt" 2>&1
printf '{"model": {"vocab_size": 50304, "n_positions": 8192, "n_embd": 2048, "n_layer": 8, "n_head": 16, "n_inner": 8192},
 "moe": {"num_experts": 8, "top_k": 2, "moe_every": 2, "capacity_factor": 0},
 "train_micro_batch_size_per_gpu": 1, "seq_len": 8192}\n' >"$LOGS/t8192.json"
{
  step plan_t8192 10 "$TED" plan --config "$LOGS/t8192.json" --gpus 1 --device cuda --precision bf16
  run_ted moe4k 40 --seq-len 2048 --n-positions 2048 "${moe[@]}" --micro-batch 2 --steps 5
  run_torch moe4k 45 --seq-len 2048 "${moe[@]}" --batch 2 --warmup 3 --steps 10
  run_ted dense4k 30 --seq-len 2048 --n-positions 2048 --num-experts 1 --micro-batch 2 --steps 5
  run_torch dense4k 35 --seq-len 2048 --num-experts 1 --batch 2 --warmup 3 --steps 10
  run_ted moe16k 45 --seq-len 2048 --n-positions 2048 "${moe[@]}" --micro-batch 2 --grad-accum 4 --steps 5
  run_torch moe16k 45 --seq-len 2048 "${moe[@]}" --batch 8 --warmup 2 --steps 5
  run_ted t8192 40 --seq-len 8192 --n-positions 8192 "${moe[@]}" --micro-batch 1 --steps 1
  GELU=0 run_ted moe4k_gelu0 30 --seq-len 2048 --n-positions 2048 "${moe[@]}" --micro-batch 2 --steps 5
  OV=1 run_ted moe4k_overlap 30 --seq-len 2048 --n-positions 2048 "${moe[@]}" --micro-batch 2 --steps 5
  LT=1 run_ted moe4k_lt 40 --seq-len 2048 --n-positions 2048 "${moe[@]}" --micro-batch 2 --steps 5 --bench-warmup 15
  PROF=2 run_ted sites_moe4k 30 --seq-len 2048 --n-positions 2048 "${moe[@]}" --micro-batch 2 --steps 5
} | tee "$LOGS/runs.jsonl"
"$py" bench/gpu_table.py "$LOGS" | tee "$LOGS/table.md"
! grep -vE '"step": "ted_(sites_|moe4k_lt|moe4k_gelu0|moe4k_overlap)' "$LOGS/runs.jsonl" | grep -qE '"status": "(fail|timeout|skipped)"'   # the sites and the timed classes: extra
