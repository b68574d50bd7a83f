#!/usr/bin/env bash
# pipeline.layers "auto" against the equal split, measured (docs/tune.md). An 8-block model with MoE
# every other block (small dense FFN, wide experts, a 1536-token vocabulary whose head costs about two
# dense blocks), pp 4, 8 micro-batches; `ted bench` runs, the two splits alternated REPS times.
#   bench/tune_balance.sh [REPS]      (default 3)
# Prints each split's predicted stage costs (model GFLOP per token, from the start-up lines), the
# measured CPU time per step of each stage ("stage_cpu_ms": the ranks share this machine's cores, so
# CPU time shows the balance where wall time cannot), and the median wall and CPU step times.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
TED=${TED:-build/ted}
source tests/mpi_env.sh
OUT=${OUT:-/tmp/ted_tune_balance}
mkdir -p "$OUT"
cfg() {   # cfg FILE LAYERS
  cat >"$1" <<JSON
{"model": {"vocab_size": 1536, "n_positions": 64, "n_embd": 128, "n_layer": 8, "n_head": 4, "n_inner": 128},
 "moe": {"num_experts": 4, "top_k": 2, "moe_every": 2, "capacity_factor": 1.25, "min_capacity": 4, "expert_inner": 2048},
 "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8, "seq_len": 64,
 "pipeline": {"layers": $2}}
JSON
}
cfg "$OUT/equal.json" "[2, 2, 2, 2]"
cfg "$OUT/auto.json" '"auto"'
for r in $(seq "$REPS"); do
  for split in equal auto; do
    OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" bench --config "$OUT/$split.json" --pp 4 --steps 5 \
      >"$OUT/$split.$r.out" 2>&1
  done
done
/usr/bin/python3 - "$OUT" "$REPS" <<'PY'
import json, re, statistics as st, sys
out, reps = sys.argv[1], int(sys.argv[2])
print("| split | predicted GFLOP/token per stage (spread) | measured CPU ms per stage, median (spread) | wall ms/step | CPU ms/step, busiest stage |")
print("|---|---|---|---|---|")
for split in ("equal", "auto"):
    runs = [open(f"{out}/{split}.{r}.out").read() for r in range(1, reps + 1)]
    pred = [float(x) for x in re.findall(r"stage \d .*?, ([0-9.e-]+) GFLOP per token", runs[0])]
    blocks = [b.strip() for b in re.findall(r"stage \d \(ranks \S+\): blocks ([0-9 -]+)", runs[0])]
    res = [json.loads(next(l for l in r.splitlines() if l.startswith("{"))) for r in runs]
    cpu = [st.median(x["stage_cpu_ms"][s] for x in res) for s in range(4)]
    spread = lambda v: f"{100 * (max(v) / min(v) - 1):.0f} %"
    print(f"| {split} ({', '.join(blocks)}) | {', '.join(f'{p:.4f}' for p in pred)} ({spread(pred)}) | "
          f"{', '.join(f'{c:.0f}' for c in cpu)} ({spread(cpu)}) | {st.median(x['ms_per_step'] for x in res):.0f} | "
          f"{st.median(max(x['stage_cpu_ms']) for x in res):.0f} |")
PY
