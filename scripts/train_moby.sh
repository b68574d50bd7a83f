#!/usr/bin/env bash
# The default run (make train): configs/moby.json on Moby-Dick, then samples from the
# final checkpoint. Outputs go to runs/moby/ (log.jsonl, checkpoints; `make plot` draws it).
set -euo pipefail
cd "$(dirname "$0")/.."
TED=${TED:-build/ted}
OUT=${OUT:-runs/moby}
mkdir -p "$OUT"
"$TED" train --config configs/moby.json --data data/moby-dick.txt --log "$OUT/log.jsonl" --save "$OUT" "$@"
echo
for prompt in "Call me " "The whale " "Queequeg "; do
  echo "--- sample (prompt \"$prompt\", temperature 0.8) ---"
  "$TED" generate --load "$OUT" --prompt "$prompt" --tokens 300 --temperature 0.8 --seed 7
done
echo
echo "validation curve ($OUT/log.jsonl):"
/usr/bin/python3 - "$OUT/log.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "val_loss" in o:
        print(f"  step {o['step']:5d}  val_loss {o['val_loss']:.4f}")
PY
