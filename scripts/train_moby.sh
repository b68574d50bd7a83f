#!/usr/bin/env bash
# The default run (make train): configs/moby.json on Moby-Dick, then samples from the
# final checkpoint. Outputs go to runs/moby/ (log.jsonl, checkpoints; `make plot` draws it).
# A run interrupted after a checkpoint continues from it (its log appended); one interrupted
# before any checkpoint starts again. Ctrl-C saves the step and prints how to continue. A run
# already complete says so and stops. Arguments go to ted train (make train ARGS="--steps 50").
set -euo pipefail
cd "$(dirname "$0")/.."
TED=${TED:-build/ted}
OUT=${OUT:-runs/moby}
mkdir -p "$OUT"
args=(--config configs/moby.json --data data/moby-dick.txt --log "$OUT/log.jsonl" --save "$OUT")
last_checkpoint() { compgen -G "$OUT/step_*/model.safetensors" | sort | tail -1 || true; }
before=$(last_checkpoint)
if [ -n "$before" ]; then
  echo "make train: continuing the run in $OUT from its last checkpoint"
  args+=(--resume "$OUT")
else
  args+=(--overwrite)   # no checkpoint yet: a log left by an interrupted start is replaced
fi
rc=0
"$TED" train "${args[@]}" "$@" || rc=$?
if [ $rc -ne 0 ]; then
  if [ $rc -eq 130 ] || [ $rc -eq 143 ]; then
    echo "make train: interrupted; \`make train\` continues from the last checkpoint (or: $TED train ${args[*]:0:8} --resume $OUT)"
  fi
  exit $rc
fi
# a resumed run that trained nothing was already complete (ted said so): no samples again
if [ -n "$before" ] && [ "$(last_checkpoint)" = "$before" ]; then
  echo "make train: nothing to train (make train ARGS=\"--steps N\" trains on to step N)"
  exit 0
fi
echo
seed=7
for prompt in "Call me " "The whale " "Queequeg "; do
  echo "--- sample (prompt \"$prompt\", temperature 0.8, seed $seed) ---"
  "$TED" generate --load "$OUT" --prompt "$prompt" --tokens 300 --temperature 0.8 --seed $seed
  seed=$((seed + 1))
done
echo
echo "validation curve ($OUT/log.jsonl):"
/usr/bin/python3 - "$OUT/log.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "val_loss" in o:
        lm = f" = lm {o['val_lm_loss']:.4f} nats/byte + aux {o['val_aux_loss']:.4f}" if "val_lm_loss" in o else ""
        print(f"  step {o['step']:5d}  val_loss {o['val_loss']:.4f}{lm}")
PY
