#!/usr/bin/env bash
# sparse_steps.sh — whole training steps with block-sparse against dense attention (design), and
# the longest sequence that trains in a memory budget. `ted bench` (its model: d 256, 4 heads,
# L 4, f 1024, 8 experts top-2 in every block, V 256) with micro-batch 1 at each T, dense and
# `fixed` (block 64, 4 local blocks, 1 global), fp32 on the CPU: ms per step, the accounted peak
# bytes and the activation bytes. Then the largest T within BUDGET bytes (default 16 GiB), computed
# from the accounted bytes: the part that is not attention (dense peak − its T² buffers) is fitted
# as a + b·T, and the attention buffers are added at each T: dense B·H·T² floats per layer plus
# T² per thread of backward scratch; sparse the layout's present blocks (sparse_bench --reps 0).
#   usage: bench/sparse_steps.sh [OUT_DIR] [T list (default 1024 2048 4096 8192)]
#   env: DENSE_MAX (default 8192) skips dense steps above it, SPARSE_MAX likewise; BUDGET bytes;
#        STEPS (default 2); THREADS (default 1: then the CPU time per step is the compute time even
#        on a shared machine); REUSE=1 keeps OUT_DIR/steps.jsonl (adds nothing) and only computes
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/sparse_bench}; shift || true
TS=${*:-1024 2048 4096 8192}
TED=${TED:-build/ted}
DENSE_MAX=${DENSE_MAX:-8192} SPARSE_MAX=${SPARSE_MAX:-8192} BUDGET=${BUDGET:-17179869184} STEPS=${STEPS:-2} THREADS=${THREADS:-1}
mkdir -p "$OUT"
echo '{"sparse_attention": {"mode": "fixed", "block": 64, "num_local_blocks": 4, "num_global_blocks": 1}}' >"$OUT/fixed.json"
echo '{}' >"$OUT/dense.json"
[ "${REUSE:-0}" = 1 ] && TS=""
[ -n "$TS" ] && : >"$OUT/steps.jsonl"
for T in $TS; do
  for mode in dense fixed; do
    [ $mode = dense ] && [ "$T" -gt "$DENSE_MAX" ] && continue
    [ $mode = fixed ] && [ "$T" -gt "$SPARSE_MAX" ] && continue
    line=$("$TED" bench --config "$OUT/$mode.json" --seq-len "$T" --n-positions "$T" --micro-batch 1 --steps "$STEPS" --threads "$THREADS")
    echo "{\"T\": $T, \"mode\": \"$mode\", \"bench\": $line}" | tee -a "$OUT/steps.jsonl"
  done
done
THREADS=$(head -1 "$OUT/steps.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bench"]["threads"])')
OMP_NUM_THREADS=$THREADS build/sparse_bench --reps 0 --T "$(python3 -c "print(','.join(str(1024 * k) for k in range(1, 161)))")" >"$OUT/sizes.jsonl"
python3 - "$OUT/steps.jsonl" "$OUT/sizes.jsonl" "$BUDGET" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
sizes = {s["T"]: s for s in map(json.loads, open(sys.argv[2]))}
budget, L = float(sys.argv[3]), 4
dense = {s["T"]: s["bench"] for s in steps if s["mode"] == "dense"}
sparse = {s["T"]: s["bench"] for s in steps if s["mode"] == "fixed"}
# dense attention buffers at T: L layers of B·H·T² floats + the backward scratch (threads · T²)
att_dense = lambda T: L * sizes[T]["dense_att_bytes"] + sizes[T]["dense_scratch_bytes"]
att_sparse = lambda T: L * sizes[T]["sparse_att_bytes"] + sizes[T]["sparse_scratch_bytes"]
Ts = sorted(dense)
(t0, t1) = (Ts[0], Ts[-1])
rest = {T: dense[T]["mem_peak_bytes"] - att_dense(T) for T in Ts}
b = (rest[t1] - rest[t0]) / (t1 - t0); a = rest[t0] - b * t0
for T in sorted(sparse):
    pred = a + b * T + att_sparse(T)
    print(f"T {T}: fixed peak {sparse[T]['mem_peak_bytes']} bytes measured, {pred:.0f} from the fit "
          f"({(pred / sparse[T]['mem_peak_bytes'] - 1) * 100:+.2f}%); ms/step fixed {sparse[T]['ms_per_step']} "
          f"(CPU {sparse[T]['cpu_ms_per_step']})"
          + (f", dense {dense[T]['ms_per_step']} (CPU {dense[T]['cpu_ms_per_step']}, peak {dense[T]['mem_peak_bytes']}, "
             f"activations {dense[T]['activation_bytes']} vs fixed {sparse[T]['activation_bytes']})" if T in dense else
             f", activations {sparse[T]['activation_bytes']}"))
for name, att in (("dense", att_dense), ("fixed", att_sparse)):
    fits = [T for T in sorted(sizes) if a + b * T + att(T) <= budget]
    best = max(fits) if fits else 0
    print(f"largest T (multiple of 1024) in {budget:.0f} bytes, {name}: {best}"
          + (f" ({a + b * best + att(best):.0f} bytes)" if best else ""))
PY
