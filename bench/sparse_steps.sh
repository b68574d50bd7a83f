#!/usr/bin/env bash
# sparse_steps.sh — whole training steps with block-sparse against dense attention (design), and
# the longest sequence that trains in a memory budget. `ted bench` (its model: d 256, 4 heads,
# L 4, f 1024, 8 experts top-2 in every block, V 256) with micro-batch 1 at each T, dense and
# `fixed` (block 64, 4 local blocks, 1 global) with stored and with recomputed probabilities
# (`fixed-rc`: "recompute": true), fp32 on the CPU: ms per step (wall and CPU), the
# accounted peak bytes and the activation bytes. Then the largest T within BUDGET bytes (default
# 16 GiB) for dense, fixed, fixed-rc, bigbird and bslongformer, computed from the accounted bytes: the part
# that is not attention (dense peak − its T² buffers) is fitted as a + b·T, and each layout's
# attention buffers are added at each T: dense B·H·T² floats per stored layer plus T² per thread
# of backward scratch; sparse the layout's present blocks (sparse_bench --reps 0); fixed-rc only
# the scratch and the backward's chunk of recomputed strips (64 MB, or the whole layer if smaller). Without
# activation checkpointing every layer stores its probabilities; with CKPT=1 one layer's do.
#   usage: bench/sparse_steps.sh [OUT_DIR] [T list (default 1024 2048 4096 8192)]
#   env: DENSE_MAX (default 8192) skips dense steps above it, SPARSE_MAX likewise; BUDGET bytes;
#        STEPS (default 2); THREADS (default 1: then the CPU time per step is the compute time even
#        on a shared machine); CKPT=1 trains with activation checkpointing; TED the binary;
#        MODES (default "dense fixed fixed-rc"); APPEND=1 adds to OUT_DIR/steps.jsonl;
#        REUSE=1 keeps OUT_DIR/steps.jsonl (adds nothing) and only computes
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/sparse_bench}; shift || true
TS=${*:-1024 2048 4096 8192}
TED=${TED:-build/ted}
DENSE_MAX=${DENSE_MAX:-8192} SPARSE_MAX=${SPARSE_MAX:-8192} BUDGET=${BUDGET:-17179869184} STEPS=${STEPS:-2} THREADS=${THREADS:-1}
CKPT=${CKPT:-0}
ck=(); [ "$CKPT" = 1 ] && ck=(--activation-checkpointing)
mkdir -p "$OUT"
echo '{"sparse_attention": {"mode": "fixed", "block": 64, "num_local_blocks": 4, "num_global_blocks": 1}}' >"$OUT/fixed.json"
echo '{"sparse_attention": {"mode": "fixed", "block": 64, "num_local_blocks": 4, "num_global_blocks": 1, "recompute": true}}' \
  >"$OUT/fixed-rc.json"
echo '{}' >"$OUT/dense.json"
[ "${REUSE:-0}" = 1 ] && TS=""
[ -n "$TS" ] && [ "${APPEND:-0}" != 1 ] && : >"$OUT/steps.jsonl"
for T in $TS; do
  for mode in ${MODES:-dense fixed fixed-rc}; do
    [ $mode = dense ] && [ "$T" -gt "$DENSE_MAX" ] && continue
    [ $mode != dense ] && [ "$T" -gt "$SPARSE_MAX" ] && continue
    line=$("$TED" bench --config "$OUT/$mode.json" --seq-len "$T" --n-positions "$T" --micro-batch 1 --steps "$STEPS" \
      --threads "$THREADS" "${ck[@]}" | tail -1)
    echo "{\"T\": $T, \"mode\": \"$mode\", \"bench\": $line}" | tee -a "$OUT/steps.jsonl"
  done
done
THREADS=$(head -1 "$OUT/steps.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bench"]["threads"])')
Tall=$(python3 -c "print(','.join(str(1024 * k) for k in range(1, 401)))")
for mode in fixed bigbird bslongformer; do
  [ -s "$OUT/sizes_$mode.jsonl" ] || OMP_NUM_THREADS=$THREADS build/sparse_bench --reps 0 --mode $mode --T "$Tall" >"$OUT/sizes_$mode.jsonl"
done
python3 - "$OUT" "$BUDGET" "$CKPT" <<'PY'
import json, sys
out, budget, ckpt = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
steps = [json.loads(l) for l in open(f"{out}/steps.jsonl")]
sizes = {m: {s["T"]: s for s in map(json.loads, open(f"{out}/sizes_{m}.jsonl"))} for m in ("fixed", "bigbird", "bslongformer")}
layers = 1 if ckpt else 4   # layers whose probabilities are held at once
dense = {s["T"]: s["bench"] for s in steps if s["mode"] == "dense"}
sparse = {s["T"]: s["bench"] for s in steps if s["mode"] == "fixed"}
rc = {s["T"]: s["bench"] for s in steps if s["mode"] == "fixed-rc"}
fx = sizes["fixed"]
att = {"dense": lambda T: layers * fx[T]["dense_att_bytes"] + fx[T]["dense_scratch_bytes"]}
for m in sizes:
    att[m] = lambda T, m=m: layers * sizes[m][T]["sparse_att_bytes"] + sizes[m][T]["sparse_scratch_bytes"]
# fixed-rc: the scratch and one chunk: min(the layer's strips, max(2^24 floats, a query block's strips
# over the 4 heads)); fixed's longest row is its last: nb/4 - 1 global blocks and 4 local ones
chunk = lambda T: 4 * min(fx[T]["sparse_att_bytes"] // 4, max(1 << 24, 4 * (T // 64 // 4 + 3) * 64 * 64))
att["fixed-rc"] = lambda T: fx[T]["sparse_scratch_bytes"] + chunk(T)
Ts = sorted(dense)
(t0, t1) = (Ts[0], Ts[-1])
rest = {T: dense[T]["mem_peak_bytes"] - att["dense"](T) for T in Ts}
b = (rest[t1] - rest[t0]) / (t1 - t0); a = rest[t0] - b * t0
print(f"activation checkpointing: {'on' if ckpt else 'off'}; rest of the model {a:.0f} + {b:.0f} bytes/token")
print("| T | ms/step (CPU): dense | fixed | fixed-rc | activation bytes: dense | fixed | fixed-rc | "
      "peak measured / fit: fixed | fixed-rc |")
print("|---|---|---|---|---|---|---|---|---|")
cell = lambda r: f"{r['ms_per_step']:.0f} ({r['cpu_ms_per_step']:.0f})" if r else "not run"
act = lambda r: str(r["activation_bytes"]) if r else "-"
fit = lambda r, T, m: f"{r['mem_peak_bytes']} / {a + b * T + att[m](T):.0f} ({((a + b * T + att[m](T)) / r['mem_peak_bytes'] - 1) * 100:+.2f} %)" if r else "-"
for T in sorted(set(dense) | set(sparse) | set(rc)):
    d, s, r = dense.get(T), sparse.get(T), rc.get(T)
    print(f"| {T} | {cell(d)} | {cell(s)} | {cell(r)} | {act(d)} | {act(s)} | {act(r)} | {fit(s, T, 'fixed')} | "
          f"{fit(r, T, 'fixed-rc')} |")
best = {}
for name in att:
    fits = [T for T in sorted(fx) if a + b * T + att[name](T) <= budget]
    best[name] = max(fits) if fits else 0
for name in att:
    print(f"largest T (multiple of 1024) in {budget:.0f} bytes, {name}: {best[name]}"
          + (f" ({best[name] / best['dense']:.1f}x dense)" if best["dense"] else "")
          + (" (the end of the range tried)" if best[name] == max(fx) else ""))
PY
