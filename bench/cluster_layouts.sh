#!/usr/bin/env bash
# Layouts x link rates on a namespace cluster of 2 nodes x 2 ranks (scripts/cluster.sh; root).
#   bench/cluster_layouts.sh [REPS] [OUTDIR]      (REPS 3 by default, OUTDIR /tmp/ted_cluster_bench)
# Three parts, runs alternated (rep outermost), medians printed as markdown tables:
#  1. layouts (pp 2 one stage per node; tp 2 x ep 2; the same with TP pairs split over nodes; dp 4 with
#     ep 4; dp 4 with ep 1) x rates (unshaped, 1gbit, 100mbit): median step time, each collective's
#     time per step (rank 0), and cross-node bytes per step from the switch ports' counters beside
#     the bytes rank 0 sent on groups that cross nodes (times the ranks);
#  2. DTD and CAC off/on for tp 2 x ep 2 at 100mbit;
#  3. OneBitAdam (freeze_step 2) against AdamW (stage 0), dp 4 across the nodes, at 1gbit and 100mbit.
# OVERLAP=N passes --overlap-degree N to every run (the expert-parallel exchange in N chunks behind
# the experts, docs/overlap.md; layouts without an all-to-all are unchanged by it).
# OVERLAP_COMM=1 adds --overlap-comm (ZeRO's reductions during the backward, docs/overlap_comm.md;
# not with the OneBitAdam part, which refuses it).
# Step times are wall times (the links are what is measured); the machine is shared, so read them
# with the spread the tables give.
set -euo pipefail
REPS=${1:-3}
OUT=${2:-/tmp/ted_cluster_bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TED=$ROOT/build/ted
C=scripts/cluster.sh
export TED_CLUSTER_PREFIX=tedb$$
trap '$C down' EXIT
mkdir -p "$OUT"
$C up 2 >/dev/null
printf 'node1 slots=2\nnode2 slots=2\n' > "$OUT/hosts"
STEPS=8
model=(--data data/moby-dick.txt --n-layer 4 --n-embd 128 --n-head 4 --n-positions 64 --seq-len 64
       --num-experts 8 --top-k 2 --moe-every 2 --grad-accum 2 --steps $STEPS --warmup 2 --eval-windows 2
       --log-every 100)
echo '{"zero_optimization": {"stage": 0}, "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 2}}}' \
  > "$OUT/onebit.json"
# brun NAME [mpirun options] -- [ted options]: one run; NAME.jsonl, NAME.out, NAME.bytes (switch port bytes)
brun() {
  local name=$1; shift
  local mo=(); while [ "$1" != -- ]; do mo+=("$1"); shift; done; shift
  local b0 b1
  local oc=(); [ "${OVERLAP_COMM:-0}" = 1 ] && [[ $name != A-onebit* ]] && oc=(--overlap-comm)
  b0=$($C stats | awk '{s += $2} END {printf "%.0f\n", s}')
  $C run "$OUT/hosts" 4 "${mo[@]}" -x OMP_NUM_THREADS=1 "$TED" train "${model[@]}" "$@" --overlap-degree "${OVERLAP:-1}" "${oc[@]}" \
    --log "$OUT/$name.jsonl" --overwrite >"$OUT/$name.out" 2>&1 || echo "run $name failed (see $OUT/$name.out)"
  b1=$($C stats | awk '{s += $2} END {printf "%.0f\n", s}')
  echo $((b1 - b0)) > "$OUT/$name.bytes"
}
layouts=("pp2|--|--pp 2 --micro-batch 4" "tp2ep2|--|--tp 2 --ep 2 --micro-batch 4"
         "tp2ep2-split|--map-by node --|--tp 2 --ep 2 --micro-batch 4" "dp4ep4|--|--ep 4 --micro-batch 2"
         "dp4|--|--micro-batch 2")
for rep in $(seq "$REPS"); do
  for rate in none 1gbit 100mbit; do
    $C shape $rate >/dev/null
    for l in "${layouts[@]}"; do
      IFS='|' read -r name mo to <<<"$l"
      # shellcheck disable=SC2086
      brun "L-$name-$rate-$rep" $mo $to
    done
  done
  $C shape 100mbit >/dev/null
  for v in "base|" "dtd|--dtd" "ckpt|--activation-checkpointing" "dtd-cac|--dtd --cac"; do
    IFS='|' read -r name opts <<<"$v"
    # shellcheck disable=SC2086
    brun "O-$name-$rep" -- --tp 2 --ep 2 --micro-batch 4 $opts
  done
  for rate in 1gbit 100mbit; do
    $C shape $rate >/dev/null
    brun "A-adamw-$rate-$rep" -- --micro-batch 2 --zero-stage 0
    brun "A-onebit-$rate-$rep" -- --micro-batch 2 --config "$OUT/onebit.json"
  done
  echo "rep $rep done"
done
/usr/bin/python3 - "$OUT" "$REPS" "$STEPS" <<'PY'
import json, statistics as st, sys, re
out, reps, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):   # median step ms (steps 3..), per-collective ms per step, tc bytes per step, ted bytes
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    rows = [r for r in rows if "step_ms" in r and r["step"] >= 3]
    ms = st.median(r["step_ms"] for r in rows)
    coll = {k: st.median(r["comm"][k]["ms"] for r in rows) for k in ("allreduce", "alltoall", "allgather", "reduce_scatter", "sendrecv")}
    tc = int(open(f"{out}/{name}.bytes").read()) / steps
    place = open(f"{out}/{name}.out").read()
    m = re.search(r"groups across nodes: (.*)", place)
    crossing = {g: int(c) > 0 for g, c in re.findall(r"(\w+) (\d+)/\d+", m.group(1))} if m else {}
    ted = st.median(sum(v["bytes"] for k, v in r["comm"].items() if "." in k and crossing.get(k.split(".")[1], k.endswith((".world", ".stage")))) for r in rows) * 4
    return ms, coll, tc, ted
def med(names):
    got = [load(n) for n in names]
    ms = [g[0] for g in got]
    coll = {k: st.median(g[1][k] for g in got) for k in got[0][1]}
    return st.median(ms), min(ms), max(ms), coll, st.median(g[2] for g in got), st.median(g[3] for g in got)
print("\n### Layouts x link rates (2 nodes x 2 ranks; median of", reps, "runs of medians over steps 3-8)\n")
print("| layout | link | step ms (min-max) | allreduce | alltoall | allgather | reduce_scatter | sendrecv | switch MB/step | ted MB/step on crossing groups |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name in ("pp2", "tp2ep2", "tp2ep2-split", "dp4ep4", "dp4"):
    for rate in ("none", "1gbit", "100mbit"):
        m, lo, hi, c, tc, ted = med([f"L-{name}-{rate}-{r}" for r in range(1, reps + 1)])
        print(f"| {name} | {rate} | {m:.0f} ({lo:.0f}-{hi:.0f}) | " + " | ".join(f"{c[k]:.0f}" for k in c) + f" | {tc / 1e6:.2f} | {ted / 1e6:.2f} |")
print("\n### DTD and CAC, tp 2 x ep 2 at 100mbit (ms per step, rank 0)\n")
print("| run | step ms (min-max) | alltoall | allreduce | allgather | switch MB/step |")
print("|---|---|---|---|---|---|")
for name in ("base", "dtd", "ckpt", "dtd-cac"):
    m, lo, hi, c, tc, ted = med([f"O-{name}-{r}" for r in range(1, reps + 1)])
    print(f"| {name} | {m:.0f} ({lo:.0f}-{hi:.0f}) | {c['alltoall']:.0f} | {c['allreduce']:.0f} | {c['allgather']:.0f} | {tc / 1e6:.2f} |")
print("\n### OneBitAdam (freeze_step 2) vs AdamW (stage 0), dp 4 across 2 nodes, steps 3-8\n")
print("| link | optimizer | step ms (min-max) | allreduce ms | switch MB/step |")
print("|---|---|---|---|---|")
for rate in ("1gbit", "100mbit"):
    for opt in ("adamw", "onebit"):
        m, lo, hi, c, tc, ted = med([f"A-{opt}-{rate}-{r}" for r in range(1, reps + 1)])
        print(f"| {rate} | {opt} | {m:.0f} ({lo:.0f}-{hi:.0f}) | {c['allreduce']:.0f} | {tc / 1e6:.2f} |")
PY
