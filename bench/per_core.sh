#!/usr/bin/env bash
# Per core against eager PyTorch: the bench model (capacity factor 1.0, dropless, dense), one thread,
# CPU time per step, ted and PyTorch alternated ROUNDS times; prints each run, then per model the
# medians, their ratio and ted's MFU by CPU time (mfu_cpu: FLOPs per core-second against one core's
# sgemm rate timed the same way).      bench/per_core.sh [ROUNDS] [OUTDIR]      (3, /tmp/ted_per_core)
# TED (build/ted), TED_B (a second ted binary, alternated too: e.g. the previous build).
set -euo pipefail
ROUNDS=${1:-3} OUT=${2:-/tmp/ted_per_core}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TED=${TED:-$ROOT/build/ted}
mkdir -p "$OUT"
models=("capacity||" "dropless|--capacity-factor 0|--capacity-factor 0" "dense|--num-experts 1|--num-experts 1")
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
for r in $(seq "$ROUNDS"); do
  for m in "${models[@]}"; do
    IFS='|' read -r name tflags pflags <<<"$m"
    # shellcheck disable=SC2086
    "$TED" bench --threads 1 $tflags 2>/dev/null | grep '^{' >"$OUT/ted-$name-$r.json"
    [ -z "${TED_B:-}" ] || "$TED_B" bench --threads 1 $tflags 2>/dev/null | grep '^{' >"$OUT/tedb-$name-$r.json"
    # shellcheck disable=SC2086
    /usr/bin/python3 "$ROOT/bench/torch_bench.py" --threads 1 --steps 5 --warmup 2 $pflags >"$OUT/torch-$name-$r.json"
    echo "round $r $name done (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys, os
out, rounds = sys.argv[1], int(sys.argv[2])
def get(kind, name, key):
    v = []
    for r in range(1, rounds + 1):
        p = f"{out}/{kind}-{name}-{r}.json"
        if os.path.exists(p) and os.path.getsize(p): v.append(json.load(open(p))[key])
    return v
print("\n| model | ted CPU ms/step (runs) | ted B | PyTorch CPU ms/step (runs) | ratio | ted MFU by CPU time |")
print("|---|---|---|---|---|---|")
for name in ("capacity", "dropless", "dense"):
    t, p, b = get("ted", name, "cpu_ms_per_step"), get("torch", name, "cpu_ms_per_step"), get("tedb", name, "cpu_ms_per_step")
    mfu = get("ted", name, "mfu_cpu")
    fmt = lambda v: f"{statistics.median(v):.0f} ({', '.join(f'{x:.0f}' for x in v)})" if v else "-"
    print(f"| {name} | {fmt(t)} | {fmt(b)} | {fmt(p)} | {statistics.median(p) / statistics.median(t):.2f}× | {statistics.median(mfu):.2f} |")
PY
