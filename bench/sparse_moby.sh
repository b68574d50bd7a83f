#!/usr/bin/env bash
# Sparse layouts against dense attention on Moby-Dick at T = 1024 (issue 11, item 4): the default
# model (configs/moby.json: d 256, L 4, 4 heads, 4 experts top-2) with seq_len 1024 and micro-batch
# 2 (the default's 2048 tokens per step), STEPS steps (default 300), dense, `fixed` (block 64,
# 4 local, 1 global) and `bigbird` (block 64, 1 random, window 3, 1 global), one process. Prints
# the validation losses side by side and each run's mean ms/step. A benchmark, not a test.
#   bash bench/sparse_moby.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
TED=${TED:-build/ted}
OUT=${1:-runs/sparse_moby}
STEPS=${STEPS:-300} EVERY=${EVERY:-100}
mkdir -p "$OUT"
for mode in dense fixed bigbird; do
  /usr/bin/python3 - "$mode" >"$OUT/$mode.json" <<'PY'
import json, sys
c = json.load(open("configs/moby.json"))
c["model"]["n_positions"] = 1024; c["seq_len"] = 1024; c["train_micro_batch_size_per_gpu"] = 2
mode = sys.argv[1]
if mode == "fixed":
    c["sparse_attention"] = {"mode": "fixed", "block": 64, "num_local_blocks": 4, "num_global_blocks": 1}
elif mode == "bigbird":
    c["sparse_attention"] = {"mode": "bigbird", "block": 64, "num_random_blocks": 1,
                             "num_sliding_window_blocks": 3, "num_global_blocks": 1}
print(json.dumps(c))
PY
  "$TED" train --config "$OUT/$mode.json" --data data/moby-dick.txt --steps "$STEPS" --eval-every "$EVERY" \
    --eval-windows 0 --log "$OUT/$mode.jsonl" --overwrite >"$OUT/$mode.out" 2>&1
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
runs = {m: [json.loads(l) for l in open(f"{sys.argv[1]}/{m}.jsonl")] for m in ("dense", "fixed", "bigbird")}
val = {m: {r["step"]: r["val_loss"] for r in rs if "val_loss" in r} for m, rs in runs.items()}
print("| step | dense | fixed | bigbird |")
print("|---|---|---|---|")
for s in sorted(val["dense"]):
    print(f"| {s} | " + " | ".join(f"{val[m].get(s, float('nan')):.4f}" for m in runs) + " |")
ms = {m: [r["step_ms"] for r in rs if "step_ms" in r][5:] for m, rs in runs.items()}
print("| mean ms/step | " + " | ".join(f"{sum(v) / max(len(v), 1):.0f}" for v in ms.values()) + " |")
PY
