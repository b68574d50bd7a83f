#!/usr/bin/env bash
# gpt2 against llama at the same parameter budget on Moby-Dick (docs/measured.md): the default model
# (configs/moby.json: d 256, L 4, 4 heads, T 128, batch 16, 1000 steps), dense and MoE (4 experts
# top-2 in every other block); llama with 2 kv heads, Mixtral's router and SwiGLU of n_inner 782
# (dense) / 724 (MoE), so that the parameter counts match within 0.05 %. The four runs go two at a
# time, one thread each; prints the validation loss at each evaluation and the CPU ms per step.
#   bench/arch_moby.sh [STEPS] [OUTDIR]      (STEPS 1000, OUTDIR /tmp/ted_arch_moby)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-1000}
OUT=${2:-/tmp/ted_arch_moby}
TED=${TED:-build/ted}
mkdir -p "$OUT"
llama() {   # llama N_INNER > file
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
c = json.load(open("configs/moby.json"))
c["model"].update({"arch": "llama", "n_kv_head": 2, "n_inner": int(sys.argv[1])})
c["moe"].update({"router": "mixtral", "expert_type": "swiglu"})
print(json.dumps(c))
PY
}
cp configs/moby.json "$OUT/gpt2.json"
llama 782 >"$OUT/llama_dense.json"
llama 724 >"$OUT/llama_moe.json"
run() {   # name config experts
  /usr/bin/time -f "%U %S" -o "$OUT/$1.time" env OMP_NUM_THREADS=1 "$TED" train --config "$OUT/$2.json" \
    --data data/moby-dick.txt --num-experts "$3" --steps "$STEPS" --log "$OUT/$1.jsonl" >"$OUT/$1.out" 2>&1
}
run gpt2_dense gpt2 1 & run llama_dense llama_dense 1 & wait
run gpt2_moe gpt2 4 & run llama_moe llama_moe 4 & wait
/usr/bin/python3 - "$OUT" "$STEPS" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
print("| model | parameters | val loss at each evaluation | CPU ms/step (whole run) |")
print("|---|---|---|---|")
for name in ("gpt2_dense", "llama_dense", "gpt2_moe", "llama_moe"):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    vals = [f"{r['step']}: {r['val_loss']:.3f}" for r in rows if "val_loss" in r]
    u, s = map(float, open(f"{out}/{name}.time").read().split()[:2])
    p = next((l.split()[1] for l in open(f"{out}/{name}.out") if l.startswith("model: ")), "?")
    print(f"| {name.replace('_', ', ')} | {p} | {'; '.join(vals)} | {1000 * (u + s) / steps:.0f} |")
PY
