#!/usr/bin/env bash
# test_cuda_emu_sparse.sh — the CUDA kernels of block-sparse attention (src/cuda/sparse_attention.cu)
# under the CUDA emulation (tests/cuda_emu; no GPU needed): `ted_emu train --device cuda` with a
# sparse layout gives per-step losses, val_loss and gradient norms within 1e-4 of `ted train` on
# the CPU, 5 steps of a tiny MoE model, T 48 in blocks of 16, for
#  - `fixed` with a global pattern per head, and with activation checkpointing;
#  - `bigbird` with per-head random blocks, under each schedule of a block's threads (round robin,
#    lowest first, highest first: a missing __syncthreads changes the result);
#  - 4 emulated ranks (tp 2, ep 2), `fixed`.
# Needs ted_emu (TED_EMU, else next to TED); exits 77 (skipped) without it.
source "${TED_ROOT:?}/tests/lib.sh"
TED_EMU=${TED_EMU:-$(dirname "$TED")/ted_emu}
if [ ! -x "$TED_EMU" ]; then echo "test_cuda_emu_sparse: skipped: no ted_emu"; exit 77; fi
source tests/mpi_env.sh
cat >"$W/fixed.json" <<'JSON'
{"sparse_attention": {"mode": "fixed", "block": 16, "num_local_blocks": 2, "num_global_blocks": 1,
  "different_layout_per_head": true, "num_different_global_patterns": 2}}
JSON
cat >"$W/bigbird.json" <<'JSON'
{"sparse_attention": {"mode": "bigbird", "block": 16, "num_random_blocks": 1, "num_sliding_window_blocks": 1,
  "different_layout_per_head": true}}
JSON
model=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 48
       --seq-len 48 --micro-batch 4 --num-experts 4 --top-k 2 --moe-every 1 --min-capacity 1 --steps 5
       --lr 3e-3 --warmup 2 --eval-every 5 --eval-windows 4 --log-every 100)
check() {   # check NAME REF OUT: losses, val_loss (compare_logs) and grad_norm within 1e-4
  local l
  if l=$(compare_logs "$2" "$3" 1e-4 2>&1) && /usr/bin/python3 - "$2" "$3" <<'PY'
import json, sys
n = lambda p: [r["grad_norm"] for r in map(json.loads, open(p)) if "grad_norm" in r]
a, b = n(sys.argv[1]), n(sys.argv[2])
assert len(a) == len(b) == 5 and max(abs(x - y) / x for x, y in zip(a, b)) <= 1e-4, (a, b)
PY
  then ok "$1: losses $l"; else bad "$1: $l"; fi
}
run() {     # run NAME ARGS...
  local name=$1; shift
  "$@" --log "$W/$name.jsonl" >"$W/$name.out" 2>&1 || { echo "FAIL $name:"; tail -3 "$W/$name.out" | cut -c1-300; }
}
for cfg in fixed bigbird; do run cpu-$cfg "$TED" train --config "$W/$cfg.json" "${model[@]}"; done
run emu-fixed "$TED_EMU" train --config "$W/fixed.json" "${model[@]}" --device cuda
check "fixed: emulated gpu = cpu" "$W/cpu-fixed.jsonl" "$W/emu-fixed.jsonl"
run emu-fixed-ac "$TED_EMU" train --config "$W/fixed.json" "${model[@]}" --device cuda --activation-checkpointing
check "fixed, activation checkpointing: emulated gpu = cpu" "$W/cpu-fixed.jsonl" "$W/emu-fixed-ac.jsonl"
for sched in roundrobin low high; do
  TED_EMU_SCHEDULE=$sched run emu-bigbird-$sched "$TED_EMU" train --config "$W/bigbird.json" "${model[@]}" --device cuda
  check "bigbird ($sched schedule): emulated gpu = cpu" "$W/cpu-bigbird.jsonl" "$W/emu-bigbird-$sched.jsonl"
done
run emu4 "${MPIRUN[@]}" -np 4 "$TED_EMU" train --config "$W/fixed.json" "${model[@]}" --micro-batch 2 --device cuda --tp 2 --ep 2
check "fixed, 4 emulated ranks (tp 2, ep 2) = 1 cpu rank" "$W/cpu-fixed.jsonl" "$W/emu4.jsonl"
summary
