#!/usr/bin/env bash
# moe.overlap_degree on a namespace cluster (scripts/cluster.sh; root): tp 2 x ep 4 (dp 4) on 2 nodes
# x 4 ranks, links shaped to RATE, overlap off (N = 1) and on (N) alternated REPS times.
#   bench/cluster_overlap.sh [REPS] [RATE] [N] [OUTDIR]     (3, 100mbit, 4, /tmp/ted_overlap_bench)
# Prints per run and as medians: step ms (median over steps 3..), the exposed communication of the
# step (every collective), the all-to-all's time in flight and exposed time, compute = step - exposed,
# and the time overlap saved against min(compute, communication) of the runs without it.
# Environment: STEPS (8), MB micro-batch (2), EXTRA (more ted flags), TED (build/ted), MPIOPTS (more
# mpirun options).
set -euo pipefail
REPS=${1:-3} RATE=${2:-100mbit} N=${3:-4}
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
       --log-every 100 --tp 2 --ep 4 --micro-batch ${MB:-2})
# shellcheck disable=SC2206
model+=(${EXTRA:-})   # more ted flags (later flags win)
for rep in $(seq "$REPS"); do
  for n in 1 "$N"; do
    # shellcheck disable=SC2086
    $C run "$OUT/hosts" 8 ${MPIOPTS:-} -x OMP_NUM_THREADS=1 "$TED" train "${model[@]}" --overlap-degree "$n" \
      --log "$OUT/n$n-$rep.jsonl" --overwrite >"$OUT/n$n-$rep.out" 2>&1 || echo "run n$n-$rep failed (see $OUT/n$n-$rep.out)"
  done
  echo "rep $rep done ($(cut -d' ' -f1-3 /proc/loadavg) load)"
done
/usr/bin/python3 - "$OUT" "$REPS" "$N" "$RATE" <<'PY'
import json, statistics as st, sys
out, reps, N, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(name):   # medians over steps 3..: step, exposed comm, all-to-all in flight and exposed
    rows = [r for r in map(json.loads, open(f"{out}/{name}.jsonl")) if "step_ms" in r and r["step"] >= 3]
    m = lambda f: st.median(f(r) for r in rows)
    exp = m(lambda r: sum(v["exposed_ms"] for k, v in r["comm"].items() if "." not in k))
    return m(lambda r: r["step_ms"]), exp, m(lambda r: r["comm"]["alltoall"]["ms"]), m(lambda r: r["comm"]["alltoall"]["exposed_ms"])
res = {n: [load(f"n{n}-{r}") for r in range(1, reps + 1)] for n in ("1", N)}
print(f"\n### tp 2 x ep 4, 2 nodes x 4 ranks, {rate}: overlap_degree 1 vs {N} ({reps} alternated runs)\n")
print("| N | step ms median (min-max) | exposed comm ms | compute ms | alltoall in flight ms | alltoall exposed ms |")
print("|---|---|---|---|---|---|")
med = {}
for n, g in res.items():
    s = [x[0] for x in g]
    med[n] = [st.median(x[i] for x in g) for i in range(4)]
    print(f"| {n} | {med[n][0]:.0f} ({min(s):.0f}-{max(s):.0f}) | {med[n][1]:.0f} | {med[n][0] - med[n][1]:.0f} | {med[n][2]:.0f} | {med[n][3]:.0f} |")
off, on = med["1"], med[N]
comm, compute = off[1], off[0] - off[1]
saved = off[0] - on[0]
print(f"\nsaved {saved:.0f} ms per step = {100 * saved / min(comm, compute):.0f}% of min(compute {compute:.0f}, "
      f"communication {comm:.0f}); all-to-all hidden with overlap: {100 * (1 - on[3] / on[2]) if on[2] else 0:.0f}% "
      f"of its time in flight; its exposed time {off[3]:.0f} -> {on[3]:.0f} ms")
PY
