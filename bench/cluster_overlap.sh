#!/usr/bin/env bash
# moe.overlap_degree on a namespace cluster (scripts/cluster.sh; root): tp 2 x ep 4 (dp 4) on 2 nodes
# x 4 ranks, links shaped to RATE, overlap off (N = 1) and each setting of NS, alternated REPS times.
#   bench/cluster_overlap.sh [REPS] [RATE] [NS] [OUTDIR]     (4, 100mbit, "2 4 4+oc", /tmp/ted_overlap_bench)
# NS: overlap degrees to compare with 1; "4+oc" is degree 4 with zero_optimization.overlap_comm too.
# The model: d 128, 8 experts top-2 in every other of 4 blocks, expert hidden size F (4096), micro-batch
# MB (4): at 100mbit its blocking step's compute and communication are about equal (docs/overlap.md).
# Prints per run and as medians over runs (each run: its median over steps 3..): step ms, the
# exposed communication of the step (every collective), compute = step - exposed, the all-to-all's
# time in flight and exposed time, and what each setting saved against min(compute, communication)
# of the runs without overlap: by step time, and by exposed communication.
# Environment: STEPS (8), MB micro-batch (4), F expert hidden size (4096), EXTRA (more ted flags), TED (build/ted), MPIOPTS (more
# mpirun options), TED_CLUSTER_PREFIX (namespaces' prefix; tedovPID).
set -euo pipefail
REPS=${1:-4} RATE=${2:-100mbit} NS=${3:-2 4 4+oc}
OUT=${4:-/tmp/ted_overlap_bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TED=${TED:-$ROOT/build/ted}
C=scripts/cluster.sh
export TED_CLUSTER_PREFIX=${TED_CLUSTER_PREFIX:-tedov$$}
trap '$C down' EXIT
mkdir -p "$OUT"
$C up 2 >/dev/null
$C shape "$RATE" >/dev/null
printf 'node1 slots=4\nnode2 slots=4\n' > "$OUT/hosts"
STEPS=${STEPS:-8}
model=(--data data/moby-dick.txt --n-layer 4 --n-embd 128 --n-head 4 --n-positions 64 --seq-len 64
       --num-experts 8 --top-k 2 --moe-every 2 --grad-accum 2 --steps "$STEPS" --warmup 2 --eval-windows 2
       --log-every 100 --tp 2 --ep 4 --micro-batch "${MB:-4}" --expert-inner "${F:-4096}")
# shellcheck disable=SC2206
model+=(${EXTRA:-})   # more ted flags (later flags win)
for rep in $(seq "$REPS"); do
  for s in 1 $NS; do
    flags=(--overlap-degree "${s%+oc}"); [ "${s%+oc}" != "$s" ] && flags+=(--overlap-comm)
    # shellcheck disable=SC2086
    $C run "$OUT/hosts" 8 ${MPIOPTS:-} -x OMP_NUM_THREADS=1 "$TED" train "${model[@]}" "${flags[@]}" \
      --log "$OUT/n$s-$rep.jsonl" --overwrite >"$OUT/n$s-$rep.out" 2>&1 || echo "run n$s-$rep failed (see $OUT/n$s-$rep.out)"
  done
  echo "rep $rep done (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
/usr/bin/python3 - "$OUT" "$REPS" "$RATE" 1 $NS <<'PY'
import json, statistics as st, sys
out, reps, rate, sets = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def load(name):   # medians over steps 3..: step, exposed comm, all-to-all in flight and exposed
    rows = [r for r in map(json.loads, open(f"{out}/{name}.jsonl")) if "step_ms" in r and r["step"] >= 3]
    m = lambda f: st.median(f(r) for r in rows)
    exp = m(lambda r: sum(v["exposed_ms"] for k, v in r["comm"].items() if "." not in k))
    return m(lambda r: r["step_ms"]), exp, m(lambda r: r["comm"]["alltoall"]["ms"]), m(lambda r: r["comm"]["alltoall"]["exposed_ms"])
res = {s: [load(f"n{s}-{r}") for r in range(1, reps + 1)] for s in sets}
print(f"\n### tp 2 x ep 4, 2 nodes x 4 ranks, {rate}: overlap_degree {' vs '.join(sets)} ({reps} alternated runs)\n")
print("| N | step ms median (min-max) | exposed comm ms | compute ms | alltoall in flight ms | alltoall exposed ms | saved / min(compute, comm): step, exposed |")
print("|---|---|---|---|---|---|---|")
med = {s: [st.median(x[i] for x in g) for i in range(4)] for s, g in res.items()}
off = med["1"]
comm, compute = off[1], off[0] - off[1]
for s, g in res.items():
    m, steps = med[s], [x[0] for x in g]
    share = "" if s == "1" else f"{100 * (off[0] - m[0]) / min(comm, compute):.0f} %, {100 * (off[1] - m[1]) / min(comm, compute):.0f} %"
    print(f"| {s} | {m[0]:.0f} ({min(steps):.0f}-{max(steps):.0f}) | {m[1]:.0f} | {m[0] - m[1]:.0f} | {m[2]:.0f} | {m[3]:.0f} | {share} |")
print(f"\nwithout overlap: compute {compute:.0f} ms, communication {comm:.0f} ms per step ({comm / compute:.2f}x)")
PY
