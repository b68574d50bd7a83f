#!/usr/bin/env bash
# bench/upcycle_moby.sh [OUT] — upcycling on Moby-Dick (docs/upcycle.md): a dense byte model (d 128,
# L 4, f 512, T 64, batch 16) trained 400 steps, then 300 more steps from --init-from of (a) itself,
# (b) ted upcycle E 4 top-2, (c) ted upcycle E 8 granularity 2 top-1 x 2; prints each run's first-step
# lm_loss (the three equal: the upcycled models start as the dense one) and its val_loss every 100 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
X=${1:-/tmp/upcycle_moby}
TED=${TED:-build/ted}
rm -rf "$X" && mkdir -p "$X"
M=(--data data/moby-dick.txt --n-embd 128 --n-layer 4 --n-head 4 --n-positions 64 --n-inner 512 --micro-batch 16
   --log-every 0 --eval-windows 200)
"$TED" train "${M[@]}" --steps 400 --lr 2e-3 --warmup 50 --save "$X/dense" --log "$X/dense.jsonl" >/dev/null
"$TED" upcycle --load "$X/dense" --num-experts 4 --top-k 2 --save "$X/g1" >/dev/null
"$TED" upcycle --load "$X/dense" --num-experts 8 --granularity 2 --top-k 1 --save "$X/g2" >/dev/null
C=(--data data/moby-dick.txt --micro-batch 16 --log-every 0 --eval-windows 200 --steps 300 --lr 1e-3 --warmup 20
   --eval-every 100)
for r in dense g1 g2; do "$TED" train "${C[@]}" --init-from "$X/$r" --log "$X/cont_$r.jsonl" >/dev/null; done
/usr/bin/python3 - "$X" <<'PY'
import json, sys
for r, what in (("dense", "dense, continued"), ("g1", "upcycled E 4 top-2"), ("g2", "upcycled E 8 G 2 top-2")):
    L = [json.loads(l) for l in open(f"{sys.argv[1]}/cont_{r}.jsonl")]
    first = next(o["lm_loss"] for o in L if "lm_loss" in o and "val_loss" not in o)
    ev = ", ".join(f"{o['step']}: {o['val_loss']:.4f}" for o in L if "val_loss" in o)
    print(f"{what:24s} step-1 lm_loss {first:.6f}  val_loss {ev}")
PY
