#!/usr/bin/env bash
# bf16 compute on the CPU against fp32, in one call, on a machine whose CPU has bf16 instructions
# (AVX512-BF16 or AMX; elsewhere it stops after the first line, exit 77):
#  1. the GEMM line of a --bf16 run (engine, oneDNN's kernel) and the CPU's bf16 flags;
#  2. the step's products on each engine (build/gemm_engines: OpenBLAS, oneDNN fp32, bf16 compute;
#     1 thread, CPU time, medians of 3 alternated), which also checks the fp32 rule of nn/gemm.c;
#  3. ted bench, the bench model with capacity factor 1.0, dropless and dense, fp32 against --bf16:
#     one thread, CPU time per step, fp32 and bf16 alternated ROUNDS times; medians and the speed-up
#     (the goal: ≥ 1.7× with AVX512-BF16, ≥ 2.5× with AMX);
#  4. the default Moby-Dick model (configs/moby.json) for 300 steps in fp32 and in bf16 compute:
#     validation loss over the whole validation split side by side (the goal: within 1 %).
#      bench/cpu_bf16.sh [ROUNDS] [OUTDIR]        (3, /tmp/ted_cpu_bf16)
# Needs build/ted and build/gemm_engines (make ted) and data/moby-dick.txt (make setup).
set -euo pipefail
ROUNDS=${1:-3} OUT=${2:-/tmp/ted_cpu_bf16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TED=${TED:-$ROOT/build/ted}
cd "$ROOT"
mkdir -p "$OUT"
unset TED_GEMM
export OMP_WAIT_POLICY=PASSIVE

# 1. what runs
"$TED" train --data data/moby-dick.txt --n-layer 1 --n-embd 64 --n-head 2 --n-positions 32 --steps 1 --eval-windows 1 \
  --bf16 --peak-tflops 1 >"$OUT/line.out" 2>&1
line=$(grep '^gemm:' "$OUT/line.out")
echo "$line"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) | bf16 flags: $(grep -o -m1 -w -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
grep -q '^gemm: bf16 compute (' <<<"$line" || { echo "cpu_bf16: no bf16 compute on this CPU: nothing to measure"; exit 77; }

# 2. the products, engine by engine
OMP_NUM_THREADS=1 "$ROOT/build/gemm_engines" --runs 3 | tee "$OUT/gemm_engines.txt"

# 3. ted bench: fp32 against bf16, alternated
models=("capacity|" "dropless|--capacity-factor 0" "dense|--num-experts 1")
for r in $(seq "$ROUNDS"); do
  for m in "${models[@]}"; do
    IFS='|' read -r name flags <<<"$m"
    for prec in fp32 bf16; do
      p=(); [ $prec = bf16 ] && p=(--bf16)
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=1 "$TED" bench --threads 1 $flags "${p[@]}" 2>/dev/null | grep '^{' >"$OUT/bench-$name-$prec-$r.json"
    done
    echo "round $r $name done (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
get = lambda n, p, k: [json.load(open(f"{out}/bench-{n}-{p}-{r}.json"))[k] for r in range(1, rounds + 1)]
print("\n| bench model | fp32 CPU ms/step (runs) | bf16 CPU ms/step (runs) | speed-up | bf16 MFU by CPU time (peak GFLOP/s) | kernel |")
print("|---|---|---|---|---|---|")
for n in ("capacity", "dropless", "dense"):
    f, b = get(n, "fp32", "cpu_ms_per_step"), get(n, "bf16", "cpu_ms_per_step")
    fmt = lambda v: f"{statistics.median(v):.0f} ({', '.join(f'{x:.0f}' for x in v)})"
    mfu, peak = statistics.median(get(n, "bf16", "mfu_cpu")), statistics.median(get(n, "bf16", "bf16_gemm_core_peak_gflops_cpu"))
    kernel = get(n, "bf16", "gemm_kernel")[0]
    print(f"| {n} | {fmt(f)} | {fmt(b)} | {statistics.median(f) / statistics.median(b):.2f}× | {mfu:.2f} ({peak:.0f}) | {kernel} |")
PY

# 4. Moby-Dick, 300 steps, fp32 and bf16 compute: validation loss over the whole split
for prec in fp32 bf16; do
  p=(); [ $prec = bf16 ] && p=(--bf16)
  "$TED" train --config configs/moby.json --data data/moby-dick.txt --steps 300 --eval-every 300 --eval-windows 0 \
    "${p[@]}" --log "$OUT/moby-$prec.jsonl" --overwrite >"$OUT/moby-$prec.out" 2>&1
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
v = lambda p: [o for o in map(json.loads, open(f"{sys.argv[1]}/moby-{p}.jsonl")) if "val_loss" in o][-1]["val_loss"]
f, b = v("fp32"), v("bf16")
print(f"\nMoby-Dick 300 steps, validation loss: fp32 {f:.4f}, bf16 compute {b:.4f} (bf16/fp32 − 1 = {100 * (b / f - 1):+.2f} %)")
PY
