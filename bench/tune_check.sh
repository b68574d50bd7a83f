#!/usr/bin/env bash
# ted tune against measurement on the namespace cluster (scripts/cluster.sh; root): 2 nodes x 2 ranks,
# two link rates (1gbit, 100mbit). At each rate `ted tune --calibrate` measures the cluster, then
# each layout runs STEPS training steps (median step time of steps 3..STEPS) and `ted tune` predicts it
# with the calibrated file. Prints a table per rate, the Spearman rank correlation over all runs and
# each prediction's error.    bench/tune_check.sh [REPS (3)] [OUTDIR]
# RATES picks the link rates ("none" leaves the links unshaped; default "1gbit 100mbit": unshaped, every
# layout on this bed is compute-bound and their order is noise, docs/tune.md).
# PREDICT_ONLY=1 predicts again from the runs and calibrations already in OUTDIR.
set -euo pipefail
REPS=${1:-3}
OUT=${2:-/tmp/ted_tune_check}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TED=${TED:-$ROOT/build/ted}
C=scripts/cluster.sh
export TED_CLUSTER_PREFIX=tedk$$
[ -n "${PREDICT_ONLY:-}" ] || trap '$C down' EXIT
[ -n "${PREDICT_ONLY:-}" ] || { rm -rf "$OUT" && mkdir -p "$OUT"; }
[ -n "${PREDICT_ONLY:-}" ] || $C up 2 >/dev/null
printf 'node1 slots=2\nnode2 slots=2\n' >"$OUT/hosts"
STEPS=8
RATES=${RATES:-1gbit 100mbit}
export RATES
cat >"$OUT/model.json" <<'JSON'
{"model": {"vocab_size": 256, "n_positions": 64, "n_embd": 128, "n_layer": 4, "n_head": 4},
 "moe": {"num_experts": 8, "top_k": 2, "moe_every": 2, "capacity_factor": 1.25},
 "seq_len": 64, "gradient_accumulation_steps": 2}
JSON
layouts=("pp2|--pp 2 --micro-batch 4" "tp2ep2|--tp 2 --ep 2 --micro-batch 4" "tp2ep2dtd|--tp 2 --ep 2 --dtd --micro-batch 4"
         "ep4|--ep 4 --micro-batch 2" "dp4|--micro-batch 2" "tp2|--tp 2 --micro-batch 4" "pp2tp2|--pp 2 --tp 2 --micro-batch 8")
for rep in $(seq "$REPS"); do
  for rate in $RATES; do
    [ -n "${PREDICT_ONLY:-}" ] || $C shape $rate >/dev/null
    cal=$OUT/cal-$rate.json
    [ -n "${PREDICT_ONLY:-}" ] || [ -f "$cal" ] || $C run "$OUT/hosts" 4 -x OMP_NUM_THREADS=1 "$TED" tune --calibrate --out "$cal" >"$OUT/cal-$rate.out" 2>&1
    for l in "${layouts[@]}"; do
      IFS='|' read -r name flags <<<"$l"
      read -ra f <<<"$flags"
      log=$OUT/$name-$rate-$rep.jsonl
      [ -n "${PREDICT_ONLY:-}" ] || $C run "$OUT/hosts" 4 -x OMP_NUM_THREADS=1 "$TED" train --config "$OUT/model.json" --data data/moby-dick.txt \
        --steps $STEPS --warmup 2 --eval-windows 2 --log-every 100 "${f[@]}" --log "$log" >"$log.out" 2>&1 || echo "run $name failed"
      for k in --pp --tp --ep; do grep -q -- "$k " <<<"$flags" || f+=("$k" 1); done   # what ted train ran
      "$TED" tune --config "$OUT/model.json" --cluster "$cal" --gpus 4 "${f[@]}" --zero-stage 1 --json \
        >"$OUT/$name-$rate.pred" 2>&1 || true
    done
  done
done
/usr/bin/python3 - "$OUT" "$STEPS" "$REPS" <<'PY'
import json, glob, os, statistics, sys
out, steps, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows, per_rate = [], {}
for rate in os.environ["RATES"].split():
    print(f"\n| layout ({rate}) | measured ms/step | predicted ms/step | error | predicted compute / comm ms |")
    print("|---|---|---|---|---|")
    for pred in sorted(glob.glob(f"{out}/*-{rate}.pred")):
        name = os.path.basename(pred)[: -len(f"-{rate}.pred")]
        want_dtd = 1 if "dtd" in name else 0
        cands = [json.loads(l) for l in open(pred) if l.startswith("{")]
        cands = [c for c in cands if c["dtd"] == want_dtd and c["cac"] == 0 and c["activation_checkpointing"] == 0
                 and c.get("overlap_degree", 1) == 1 and not c.get("overlap_comm", 0)]
        if not cands: continue
        p = cands[0]
        meas = []
        for r in range(1, reps + 1):
            lines = [json.loads(l) for l in open(f"{out}/{name}-{rate}-{r}.jsonl") if '"step_ms"' in l]
            meas += [o["step_ms"] for o in lines if o["step"] >= 3]
        m = statistics.median(meas)
        rows.append((m, p["step_ms"]))
        per_rate.setdefault(rate, []).append((m, p["step_ms"]))
        print(f"| {name} | {m:.0f} | {p['step_ms']:.0f} | {p['step_ms'] / m - 1:+.0%} | {p['compute_ms']:.0f} / {p['comm_ms']:.0f} |")
def ranks(v):
    o = sorted(range(len(v)), key=lambda i: v[i]); r = [0] * len(v)
    for k, i in enumerate(o): r[i] = k
    return r
def spearman(rows):
    a, b = ranks([r[0] for r in rows]), ranks([r[1] for r in rows])
    n = len(rows)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(a, b)) / (n * (n * n - 1)) if n > 1 else float("nan")
print("\n" + "; ".join(f"Spearman at {k}: {spearman(v):.2f}" for k, v in per_rate.items()))
print(f"Spearman over {len(rows)} runs: {spearman(rows):.2f}; within 25 %: "
      f"{sum(abs(p / m - 1) <= 0.25 for m, p in rows)} of {len(rows)}")
PY
