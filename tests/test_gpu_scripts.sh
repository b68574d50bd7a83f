#!/usr/bin/env bash
# The GPU measurement scripts hold together without a GPU, so that the one call a lent GPU machine
# allows does not fail on them: they parse (bash -n); without nvidia-smi, scripts/gpu_check.sh and
# bench/gpu_bench.sh stop at once with one line and exit 2; bench/torch_bench.py's fast model
# (the GPU baseline) equals the reference model (--check: loss and gradients, float64) and both of
# its implementations run a tiny CPU shape (bf16 and dropless too); bench/resid_precision.py runs
# 3 steps (its bf16 residual changes the loss); bench/gpu_table.py turns logs into the table (ratio,
# MFU, memory, the plan figure, TED_GPU_PROF lines) and names a failed run.
set -uo pipefail
: "${TED_ROOT:?}" "${TED_TMP:?}"
PYTHON=${PYTHON:-/usr/bin/python3}
rm -rf "$TED_TMP" && mkdir -p "$TED_TMP"
cd "$TED_ROOT" || exit
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

for f in scripts/gpu_check.sh scripts/gpu_lib.sh scripts/device_deps.sh bench/gpu_bench.sh; do
  if bash -n "$f"; then ok "bash -n $f"; else bad "bash -n $f"; fi
done

if command -v nvidia-smi >/dev/null; then
  echo "note: nvidia-smi is here: the no-GPU stop is not checked"
else
  for f in scripts/gpu_check.sh bench/gpu_bench.sh; do
    out=$(OUT="$TED_TMP/out" timeout 20 bash "$f" 2>&1); rc=$?
    if [ $rc -eq 2 ] && [ "$out" = "$(basename "$f" .sh): no GPU: nvidia-smi not found" ]; then ok "$f without a GPU: $out"
    else bad "$f without a GPU: exit $rc, output: $out"; fi
  done
fi

if out=$("$PYTHON" bench/torch_bench.py --check 2>&1); then ok "torch_bench --check: ${out##*$'\n'}"
else bad "torch_bench --check: $out"; fi
tiny=(--steps 2 --warmup 1 --batch 2 --seq-len 16 --n-embd 32 --n-layer 2 --n-head 4 --n-inner 64 --vocab-size 64
      --num-experts 4 --moe-every 2 --threads 1 --peak-tflops 1)
for flags in "--impl ref" "--impl fast" "--impl fast --bf16 --capacity-factor 0" "--impl ref --bf16"; do
  # shellcheck disable=SC2086  # flags is a list of flags
  out=$("$PYTHON" bench/torch_bench.py "${tiny[@]}" $flags 2>&1)
  if "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1].splitlines()[-1]); assert r["ms_per_step_median"] > 0 and r["mfu_median"] > 0' "$out" 2>/dev/null
  then ok "torch_bench $flags on the CPU"; else bad "torch_bench $flags on the CPU: $out"; fi
done
# bench/resid_precision.py for 3 steps: both runs finite, and the bf16 residual changes the loss
out=$("$PYTHON" bench/resid_precision.py --steps 3 --seeds 1 --n-layer 2 --eval-windows 4 --threads 1 2>&1)
if "$PYTHON" -c 'import json, math, sys; r = json.loads(sys.argv[1].splitlines()[0])
assert math.isfinite(r["val_loss_fp32_resid"]) and math.isfinite(r["val_loss_bf16_resid"]) and r["gap"] != 0' "$out" 2>/dev/null
then ok "resid_precision.py: ${out%%$'\n'*}"; else bad "resid_precision.py: $out"; fi

# the table from made-up logs: ted 100 ms, PyTorch 150 ms (median) at MoE 4 K; dense ted failed; a plan row
d=$TED_TMP/logs; mkdir -p "$d"
echo "NVIDIA H100 80GB HBM3, 580.159.04, 1980 MHz, 1980 MHz, 2619 MHz" >"$d/card.txt"
{ echo '{"ms_per_step": 100.0, "mfu": 0.17, "device_bytes_peak": 30000000000}'
  echo '{"gpu_prof": {"rank": 0, "steps": 4, "ms_per_step": {"gemm": 40.0, "optimizer": 20.0, "total": 60.0}, "launches_per_step": {"gemm": 100.0, "total": 120.0}, "host_syncs_per_step": 4.0, "host_sync_ms_per_step": 0.1}}'
} >"$d/ted_moe4k.txt"
{ echo '{"gpu_prof_site": {"rank": 0, "site": "gemm NT rx8192x2048 in cu_experts_forward", "kind": "gemm", "ms_per_step": 12.5, "calls_per_step": 32.0, "tflops": 410.2}}'
  echo '{"gpu_prof_site": {"rank": 0, "site": "cu_opt_adamw", "kind": "optimizer", "ms_per_step": 10.25, "calls_per_step": 1.0}}'
} >"$d/ted_sites_moe4k.txt"
echo '{"ms_per_step": 160.0, "ms_per_step_median": 150.0, "mfu_median": 0.11, "peak_mem_gib": 20.0, "torch": "2.11", "matmul_bf16_tflops": 780.0, "matmul_n": 8192, "peak_tflops": 989.4}' >"$d/torch_moe4k.txt"
echo "ted: --device cuda: out of device memory" >"$d/ted_dense4k.txt"
echo "  tp 1   ep 1    dp 1     edp 1        20000000000 bytes  fits  (params 1, grads 1, optimizer 1); activations 40000000000 bytes (per micro-batch 1)" >"$d/plan_t8192.txt"
echo '{"ms_per_step": 900.0, "mfu": 0.2, "device_bytes_peak": 63000000000}' >"$d/ted_t8192.txt"
{ echo '{"ms_per_step": 90.0, "mfu": 0.19, "device_bytes_peak": 30000000000}'
  echo '{"gpu_prof": {"rank": 0, "steps": 4, "ms_per_step": {"gemm": 30.0, "total": 50.0}, "launches_per_step": {"total": 120.0}, "host_syncs_per_step": 4.0, "host_sync_ms_per_step": 0.1, "lt": {"asked": 198, "gemms": 900, "classes_timed": 112, "another_won": 75}}}'
} >"$d/ted_moe4k_lt.txt"
{ echo '{"ms_per_step": 104.0, "mfu": 0.16, "device_bytes_peak": 30000000000}'
  echo '{"gpu_prof": {"rank": 0, "steps": 4, "ms_per_step": {"gemm": 38.0, "norm_elementwise": 9.0, "total": 64.0}, "launches_per_step": {"total": 130.0}, "host_syncs_per_step": 4.0, "host_sync_ms_per_step": 0.1}}'
} >"$d/ted_moe4k_gelu0.txt"
echo '{"ms_per_step": 95.0, "mfu": 0.18, "device_bytes_peak": 30000000000}' >"$d/ted_moe4k_overlap.txt"
table=$("$PYTHON" bench/gpu_table.py "$d" 2>&1)
echo "$table"
want=("| MoE dropless, 4 K tokens/step | 100.0 | 150.0 | 1.50x | 0.170 | 0.110 | 30.0 | 21.5 |"
      "| dense, 4 K tokens/step | ted: --device cuda: out of device memory | did not run |"
      "device peak 63.0 GB; ted plan 60.0 GB (peak / plan 1.050)" "| shape | gemm | optimizer | total ms | launches | host syncs |" "| moe4k | 40.0 | 20.0 | 60.0 | 120 | 4 |" "matmul 780 TFLOP/s"
      "the 2 slowest of 2 sites at sites_moe4k" "| gemm NT rx8192x2048 in cu_experts_forward | gemm | 12.50 | 32.0 | 410 |"
      "| cu_opt_adamw | optimizer | 10.25 | 1.0 | - |"
      "MoE 4 K, TED_LT_TUNE=1 (15 untimed steps first): ted 90.0 ms/step (without: 100.0); gemm 30.0 ms; 112 classes timed, another candidate won 75"
      "MoE 4 K, TED_LT_GELU=0 (GELU's own passes): ted 104.0 ms/step (with the epilogues: 100.0); gemm 38.0 / 40.0 ms"
      "MoE 4 K, TED_OPT_OVERLAP=1 (AdamW beside the next forward): ted 95.0 ms/step (in one launch: 100.0)")
for w in "${want[@]}"; do
  if grep -qF -- "$w" <<<"$table"; then ok "gpu_table: $w"; else bad "gpu_table lacks: $w"; fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
