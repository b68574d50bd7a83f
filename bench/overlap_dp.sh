#!/usr/bin/env bash
# zero_optimization.overlap_comm on the namespace cluster (scripts/cluster.sh; root): dp 8 on 2 nodes
# x 4 ranks, one thread per rank, overlap off and on alternated REPS times at link RATE.
#   bench/overlap_dp.sh [REPS] [RATE] [STAGE] [OUTDIR]   (3, 100mbit, 1, /tmp/ted_overlap_dp)
# For each run, from rank 0's log over steps 3..STEPS: the median step time, the median exposed
# communication (the sum of every group collective's exposed_ms) and compute = step - exposed.
# Printed: each run, then the medians over runs with their ranges, and the share of
# min(compute, communication) that overlap hid: (exposed off - exposed on) / min(compute off, exposed off).
# Environment: STEPS (8), MB micro-batch (8), TED (build/ted), TED_CLUSTER_PREFIX (tedzo).
set -euo pipefail
REPS=${1:-3}
RATE=${2:-100mbit}
STAGE=${3:-1}
OUT=${4:-/tmp/ted_overlap_dp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TED=${TED:-$ROOT/build/ted}
C=scripts/cluster.sh
export TED_CLUSTER_PREFIX=${TED_CLUSTER_PREFIX:-tedzo}
trap '$C down >/dev/null' EXIT
mkdir -p "$OUT"
$C up 2 >/dev/null
$C shape "$RATE" >/dev/null
printf 'node1 slots=4\nnode2 slots=4\n' > "$OUT/hosts"
STEPS=${STEPS:-8}
model=(--data data/moby-dick.txt --n-layer 4 --n-embd 128 --n-head 4 --n-positions 64 --seq-len 64
       --num-experts 8 --top-k 2 --moe-every 2 --grad-accum 2 --micro-batch "${MB:-8}" --steps "$STEPS" --warmup 2
       --eval-windows 2 --log-every 100 --zero-stage "$STAGE")
for rep in $(seq "$REPS"); do
  for ov in off on; do
    flag=(); [ $ov = on ] && flag=(--overlap-comm)
    $C run "$OUT/hosts" 8 -x OMP_NUM_THREADS=1 "$TED" train "${model[@]}" "${flag[@]}" \
      --log "$OUT/$ov-$rep.jsonl" --overwrite >"$OUT/$ov-$rep.out" 2>&1 || echo "run $ov-$rep failed (see $OUT/$ov-$rep.out)"
    echo "run $ov $rep done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
done
/usr/bin/python3 - "$OUT" "$REPS" <<'PY'
import json, statistics as st, sys
out, reps = sys.argv[1], int(sys.argv[2])
def run(path):
    rows = [o for o in map(json.loads, open(path)) if "step" in o and "comm" in o and o["step"] >= 3]
    step = st.median(o["step_ms"] for o in rows)
    exp = st.median(sum(v["exposed_ms"] for k, v in o["comm"].items() if "." in k) for o in rows)
    return step, exp, step - exp
res = {ov: [run(f"{out}/{ov}-{r}.jsonl") for r in range(1, reps + 1)] for ov in ("off", "on")}
print("| run | overlap | step ms | exposed comm ms | compute ms |\n|---|---|---|---|---|")
for r in range(reps):
    for ov in ("off", "on"):
        s, e, c = res[ov][r]
        print(f"| {r + 1} | {ov} | {s:.0f} | {e:.0f} | {c:.0f} |")
med = {ov: [st.median(x[i] for x in res[ov]) for i in range(3)] for ov in res}
rng = {ov: [(min(x[i] for x in res[ov]), max(x[i] for x in res[ov])) for i in range(3)] for ov in res}
print("\n| overlap | step ms (min-max) | exposed comm ms (min-max) | compute ms (min-max) |\n|---|---|---|---|")
for ov in ("off", "on"):
    print(f"| {ov} | " + " | ".join(f"{med[ov][i]:.0f} ({rng[ov][i][0]:.0f}-{rng[ov][i][1]:.0f})" for i in range(3)) + " |")
small = min(med["off"][2], med["off"][1])
print(f"\nhidden: {med['off'][1] - med['on'][1]:.0f} ms of min(compute {med['off'][2]:.0f}, communication "
      f"{med['off'][1]:.0f}) = {100 * (med['off'][1] - med['on'][1]) / small:.0f} %; step {med['off'][0]:.0f} -> "
      f"{med['on'][0]:.0f} ms ({100 * (1 - med['on'][0] / med['off'][0]):.0f} % less)")
PY
