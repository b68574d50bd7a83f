#!/usr/bin/env bash
# 1-bit Adam against AdamW on the same ranks (issue 10's convergence check): the default Moby-Dick
# model (configs/moby.json) on NP ranks (dp NP, default 4), STEPS steps (default 1000); 1-bit Adam
# freezes the variance at FREEZE (default 150) and then averages momenta by the 1-bit all-reduce.
# Prints each run's validation losses and the final relative gap. A benchmark, not a test.
#   bash bench/onebit_converge.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
TED=${TED:-build/ted}
OUT=${1:-runs/onebit}
NP=${NP:-4} STEPS=${STEPS:-1000} FREEZE=${FREEZE:-150}
source tests/mpi_env.sh
mkdir -p "$OUT"
/usr/bin/python3 - "$FREEZE" >"$OUT/onebit.json" <<'PY'
import json, sys
c = json.load(open("configs/moby.json"))
c["optimizer"]["type"] = "OneBitAdam"
c["optimizer"]["params"]["freeze_step"] = int(sys.argv[1])
c["zero_optimization"] = {"stage": 0}
print(json.dumps(c))
PY
for opt in adamw onebit; do
  cfg=configs/moby.json; [ $opt = onebit ] && cfg=$OUT/onebit.json
  t0=$(date +%s)
  "${MPIRUN[@]}" -np "$NP" "$TED" train --config "$cfg" --data data/moby-dick.txt --steps "$STEPS" \
    --threads 1 --log "$OUT/$opt.jsonl" --overwrite >"$OUT/$opt.out" 2>&1
  echo "$opt: $(( $(date +%s) - t0 )) s"
done
/usr/bin/python3 - "$OUT/adamw.jsonl" "$OUT/onebit.jsonl" <<'PY'
import json, sys
val = lambda p: [(r["step"], r["val_loss"]) for r in map(json.loads, open(p)) if "val_loss" in r]
a, o = val(sys.argv[1]), val(sys.argv[2])
print("| step | AdamW val loss | 1-bit Adam val loss | gap |")
print("|---|---|---|---|")
for (s, x), (_, y) in zip(a, o):
    print(f"| {s} | {x:.4f} | {y:.4f} | {(y - x) / x * 100:+.2f} % |")
PY
