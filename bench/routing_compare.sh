#!/usr/bin/env bash
# The routing family side by side (issue 12, item 5): the default Moby-Dick model (configs/moby.json)
# with each router / expert option, one process. Prints a Markdown table: final validation loss,
# dropped fraction and worst-block max/mean expert load (means over the run's steps), ms/step (wall,
# mean after the first 5 steps) and the process's CPU ms per step (user + system over the whole run,
# final evaluation included: the figure to compare when the machine is shared). A benchmark, not a
# test: STEPS (default 1000) and EVAL_WINDOWS (default all) shorten it; ONLY (an extended regular
# expression) runs only the matching variants; TABLE_ONLY=1 runs nothing and tabulates OUT_DIR's logs.
#   bash bench/routing_compare.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
TED=${TED:-build/ted}
OUT=${1:-runs/routing}
STEPS=${STEPS:-1000}
EVAL_WINDOWS=${EVAL_WINDOWS:-0}
mkdir -p "$OUT"
variants=(
  "topk|"
  "noisy_topk|--router noisy_topk"
  "switch (top-1)|--router switch --top-k 1"
  "gshard|--router gshard"
  "expert_choice|--router expert_choice"
  "topk + bias balancing, aux 0|--bias-update-rate 0.001 --aux-coef 0"
  "8 swiglu f_e 256, top-4 + 1 shared|--num-experts 8 --top-k 4 --expert-type swiglu --expert-inner 256 --shared-experts 1"
)
logname() { echo "$OUT/$(echo "$1" | tr -c 'a-z0-9' '_').jsonl"; }
for v in "${variants[@]}"; do
  IFS='|' read -r name opts <<<"$v"
  [ "${TABLE_ONLY:-0}" = 1 ] && continue
  [ -n "${ONLY:-}" ] && ! [[ "$name" =~ $ONLY ]] && continue
  read -ra extra <<<"$opts"
  log=$(logname "$name")
  /usr/bin/time -f "%U %S" -o "${log%.jsonl}.time" "$TED" train --config configs/moby.json --data data/moby-dick.txt \
    --steps "$STEPS" --eval-every 0 --eval-windows "$EVAL_WINDOWS" --log-every 0 --log "$log" --overwrite "${extra[@]}" >/dev/null
done
echo "| variant | val loss | dropped | max/mean load | ms/step | CPU ms/step |"
echo "|---|---|---|---|---|---|"
for v in "${variants[@]}"; do
  IFS='|' read -r name opts <<<"$v"
  log=$(logname "$name")
  [ -s "$log" ] || continue
  /usr/bin/python3 - "$log" "$name" "${log%.jsonl}" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "step_ms" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
mean = lambda xs: sum(xs) / max(len(xs), 1)
cpu = "-"
for ext in (".time", ".cpu"):   # /usr/bin/time's "user sys", or a watcher's last reading of user+sys
    if os.path.exists(sys.argv[3] + ext):
        cpu = f"{sum(map(float, open(sys.argv[3] + ext).read().split())) * 1e3 / max(len(steps), 1):.0f}"
        break
print(f"| {sys.argv[2]} | {val[-1] if val else float('nan'):.4f} | {mean([r['dropped_frac'] for r in steps]):.3f} | "
      f"{mean([r['max_mean'] for r in steps]):.2f} | {mean([r['step_ms'] for r in steps[5:]]):.0f} | {cpu} |")
PY
done
