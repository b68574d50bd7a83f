#!/usr/bin/env bash
# ted tune's performance model against the TED paper's Summit runs (Singh et al., ICS '23, section 7): the weak-scaling
# table (16 experts; 1.3B/2.7B/6.7B/13B bases on 32/64/128/256 V100 at tp 1/2/4/8) and a Fig. 5
# style breakdown (baseline, +DTD, +DTD+CAC), the strong-scaling runs and the tiled optimizer's memory.
# Assumptions (the paper's Table 1 was not in the text we worked from): GPT-3's shapes (Brown et al.), T 2048,
# V 50257, an MoE FFN in every other block, top-1 routing with capacity factor 1, bf16, ZeRO-1,
# activation checkpointing on (the paper always checkpoints), the global batch of GPT-3 for the
# base (1.3B, 2.7B: 512 sequences; 6.7B, 13B: 1024), ep = 16 (one expert per EP rank).
# Usage: bash bench/tune_paper.sh [build/ted]
set -euo pipefail
TED=${1:-build/ted}
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
# ted's own activations (fp32, and CAC's stash of each MoE block's exchanges) do not fit the 6.7B and
# 13B layouts the paper ran into Summit's 16 GB; the step times are compared on Summit with 32 GB
# devices, so that those layouts are admitted. The strong-scaling expert counts use the real 16 GB.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
sed 's/"memory_gb": 16/"memory_gb": 32/' "$ROOT/configs/clusters/summit.json" >"$D/summit32.json"
model() {   # name L d heads
  cat >"$D/$1.json" <<JSON
{"model": {"vocab_size": 50257, "n_positions": 2048, "n_embd": $3, "n_layer": $2, "n_head": $4},
 "moe": {"num_experts": 16, "top_k": 1, "moe_every": 2, "capacity_factor": 1.0},
 "seq_len": 2048, "bf16": {"enabled": true}}
JSON
}
model 1.3B 24 2048 16; model 2.7B 32 2560 32; model 6.7B 32 4096 32; model 13B 40 5120 40
row() {   # name gpus tp batch
  "$TED" tune --config "$D/$1.json" --cluster "$D/summit32.json" --gpus "$2" --tp "$3" --ep 16 --pp 1 --zero-stage 1 \
    --activation-checkpointing --global-batch "$4" --json >"$D/$1.rows"
  /usr/bin/python3 - "$D/$1.rows" "$1" "$2" "$3" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("overlap_degree", 1) == 1 and not r.get("overlap_comm", 0)]   # the paper overlapped nothing
fit = [r for r in rows if r["fits"]]
def best(dtd, cac):
    c = [r for r in fit if r["dtd"] == dtd and r["cac"] == cac]
    return min(c, key=lambda r: r["step_ms"]) if c else None
b, o = best(0, 0), best(1 if int(sys.argv[4]) > 1 else 0, 1)   # tp 1: DTD has nothing to drop
if not b or not o:
    print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | no layout fits in 32 GB |"); sys.exit()
a2a = lambda r: sum(v for k, v in r["comm"].items() if k.startswith("alltoall"))
ar = lambda r: sum(v for k, v in r["comm"].items() if k.startswith("allreduce.tp"))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | mb {o['micro_batch']} | {b['step_ms']/1e3:.2f} | {o['step_ms']/1e3:.2f} | "
      f"{1 - o['step_ms']/b['step_ms']:.0%} | {a2a(b)/b['step_ms']:.0%} | {1 - a2a(o)/max(a2a(b),1e-9):.0%} | "
      f"{'-' if ar(b) == 0 else format(1 - ar(o)/ar(b), '.0%')} | {o['compute_ms']/o['step_ms'] * 0.5:.1%} |")
PY
}
echo "| base | GPUs | tp | batch split | baseline s/step | DTD+CAC s/step | gain | all-to-all share (baseline) | all-to-all saved | TP all-reduce saved | % of peak (DTD+CAC) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row 1.3B 32 1 512; row 2.7B 64 2 512; row 6.7B 128 4 1024; row 13B 256 8 1024

# Fig. 5's bars for the 6.7B base at tp 4 on 128 GPUs: baseline, +DTD, +CAC, +DTD+CAC
"$TED" tune --config "$D/6.7B.json" --cluster "$D/summit32.json" --gpus 128 --tp 4 --ep 16 --pp 1 --zero-stage 1 \
  --activation-checkpointing --global-batch 1024 --json >"$D/fig5.rows"
echo
echo "| 6.7B, tp 4, 128 GPUs | step s | all-to-all s | TP all-reduce s | all-gather + reduce-scatter (TP) s |"
echo "|---|---|---|---|---|"
/usr/bin/python3 - "$D/fig5.rows" <<'PY'
import json, sys
every = [r for r in map(json.loads, open(sys.argv[1])) if r["fits"]]
plain = [r for r in every if r["overlap_degree"] == 1 and not r["overlap_comm"]]   # the paper overlapped nothing
for name, dtd, cac, rows in (("baseline", 0, 0, plain), ("+DTD", 1, 0, plain), ("+CAC", 0, 1, plain),
                             ("+DTD+CAC", 1, 1, plain), ("+DTD+CAC, ted's overlap", 1, 1, every)):
    r = min((r for r in rows if r["dtd"] == dtd and r["cac"] == cac), key=lambda r: r["step_ms"])
    part = lambda p: sum(v for k, v in r["comm"].items() if k.startswith(p)) / 1e3
    extra = f" (od {r['overlap_degree']}, oc {r['overlap_comm']}: {r['hidden_ms']/1e3:.2f} s hidden)" if rows is every else ""
    print(f"| {name}{extra} | {r['step_ms']/1e3:.2f} | {part('alltoall'):.2f} | {part('allreduce.tp'):.2f} | "
          f"{part('allgather.tp') + part('reduce_scatter.tp'):.2f} |")
PY

# Strong scaling (the paper's Fig. 8): each base on 32..256 GPUs at its tp (1.3B: 1, 2.7B: 2, 6.7B: 4),
# experts in proportion to the GPUs, from the most that fit at 32 GPUs (the paper's recipe) up to 128,
# ep = the experts (or dp when fewer), the global batch fixed; DTD+CAC against the baseline at each size.
strong() {   # name tp batch
  local e0=0 rows="$D/$1.strong"
  for e in 64 32 16 8 4; do   # the most experts that fit at 32 GPUs, baseline layout
    sed "s/\"num_experts\": 16/\"num_experts\": $e/" "$D/$1.json" >"$D/$1.e.json"
    local dp=$((32 / $2)); local ep=$((e < dp ? e : dp))
    "$TED" tune --config "$D/$1.e.json" --cluster summit --gpus 32 --tp "$2" --ep $ep --pp 1 --zero-stage 1 \
      --activation-checkpointing --global-batch "$3" --json >"$D/$1.e.rows"
    if grep '"dtd": 0, "cac": 0.*"fits": true' "$D/$1.e.rows" >/dev/null; then e0=$e; break; fi
  done
  if [ $e0 = 0 ]; then echo "| $1 | $2 | no expert count fits at 32 GPUs | | | |"; return; fi
  : >"$rows"
  for g in 32 64 128 256; do
    local e=$((e0 * g / 32 > 128 ? 128 : e0 * g / 32)) dp=$((g / $2)); local ep=$((e < dp ? e : dp))   # at most 128, as the paper
    sed "s/\"num_experts\": 16/\"num_experts\": $e/" "$D/$1.json" >"$D/$1.g.json"
    "$TED" tune --config "$D/$1.g.json" --cluster "$D/summit32.json" --gpus $g --tp "$2" --ep $ep --pp 1 --zero-stage 1 \
      --activation-checkpointing --global-batch "$3" --json | sed "s/^{/{\"gpus\": $g, \"experts\": $e, /" >>"$rows"
  done
  /usr/bin/python3 - "$rows" "$1" "$2" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("overlap_degree", 1) == 1 and not r.get("overlap_comm", 0)]   # the paper overlapped nothing
cells = []
for g in (32, 64, 128, 256):
    fit = [r for r in rows if r["gpus"] == g and r["fits"]]
    best = lambda d, c: min((r for r in fit if r["dtd"] == d and r["cac"] == c), key=lambda r: r["step_ms"], default=None)
    b, o = best(0, 0), best(1 if int(sys.argv[3]) > 1 else 0, 1)
    e = next((r["experts"] for r in rows if r["gpus"] == g), 0)
    cells.append(f"{e} exp.: {b['step_ms']/1e3:.1f} → {o['step_ms']/1e3:.1f} s ({1 - o['step_ms']/b['step_ms']:.0%})" if b and o else f"{e} exp.: no fit")
print(f"| {sys.argv[2]} | {sys.argv[3]} | " + " | ".join(cells) + " |")
PY
}
echo
echo "| strong scaling: base | tp | 32 GPUs | 64 GPUs | 128 GPUs | 256 GPUs |"
echo "|---|---|---|---|---|---|"
strong 1.3B 1 512; strong 2.7B 2 512; strong 6.7B 4 1024

# The tiled optimizer (the paper's section 4.2): the 6.7B base with 16 experts on 32 A100s of 40 GB, bf16,
# ZeRO-1; each tp's best layout with tiles of 1.8 M elements against tiling off (tile_size 0).
sed 's/"memory_gb": 80/"memory_gb": 40/; s/"nodes": 8/"nodes": 4/' configs/clusters/dgx-a100.json >"$D/a100-40.json"
echo
echo "| 6.7B x 16, 32 A100 40 GB | peak GB per GPU, tiles of 1.8 M (state + optimizer up-cast) | tiling off |"
echo "|---|---|---|"
for tp in 1 2 4; do   # ep 8 needs dp >= 8
  for tile in 1800000 0; do
    sed "s/\"seq_len\": 2048/\"seq_len\": 2048, \"optimizer\": {\"tile_size\": $tile}/" "$D/6.7B.json" >"$D/tile.json"
    "$TED" tune --config "$D/tile.json" --cluster "$D/a100-40.json" --gpus 32 --tp $tp --ep 8 --pp 1 --zero-stage 1 \
      --activation-checkpointing --global-batch 1024 --json >"$D/tile$tp-$tile.rows" 2>/dev/null || true
  done
  /usr/bin/python3 - "$D/tile$tp-1800000.rows" "$D/tile$tp-0.rows" "$tp" <<'PY'
import json, sys
def cell(path):
    rows = [r for r in (json.loads(l) for l in open(path) if l.startswith("{")) if r.get("overlap_degree", 1) == 1 and not r.get("overlap_comm", 0)]
    if not rows: return "no layout"
    r = min(rows, key=lambda r: r["mem_bytes"])   # the leanest layout of this tp
    fit = "fits" if r["fits"] else "out of memory"
    return f"{r['mem_bytes']/1e9:.1f} ({r['state_bytes']/1e9:.1f} + {r['opt_temp_bytes']/1e9:.2f}), {fit}"
print(f"| tp {sys.argv[3]} | {cell(sys.argv[1])} | {cell(sys.argv[2])} |")
PY
done
