#!/usr/bin/env bash
# gpu_bench.sh - ted vs eager PyTorch on one GPU, bf16, for the GPT-3-style MoE of the issue:
# d 2048, L 24, 16 heads, T 2048, f 8192, 8 experts top-2 in every other block, V 50304,
# capacity factor 1.0. Run from the repo root on a GPU machine after building ted with CUDA.
# Environment: TED (build/ted), B micro-batch (2), STEPS (5), PEAK_TFLOPS (989.4: H100/H200 SXM
# dense bf16), OUT (.: gpu_bench_ted.json, gpu_bench_torch.json), PYTHON (a python with torch),
# TORCH_ARGS (extra torch_bench.py flags, e.g. --fused-adamw).
set -euo pipefail
TED=${TED:-build/ted} B=${B:-2} STEPS=${STEPS:-5} PEAK_TFLOPS=${PEAK_TFLOPS:-989.4} OUT=${OUT:-.}
if [ -z "${PYTHON:-}" ]; then
    if /usr/bin/python3 -c 'import torch' 2>/dev/null; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
mkdir -p "$OUT"

"$TED" bench --device cuda --bf16 --n-embd 2048 --n-layer 24 --n-head 16 --n-positions 2048 \
    --seq-len 2048 --n-inner 8192 --num-experts 8 --top-k 2 --moe-every 2 --vocab-size 50304 \
    --micro-batch "$B" --steps "$STEPS" | tee "$OUT/gpu_bench_ted.json"

# shellcheck disable=SC2086  # TORCH_ARGS is a list of flags
"$PYTHON" bench/torch_bench.py --device cuda --bf16 --peak-tflops "$PEAK_TFLOPS" \
    --n-embd 2048 --n-layer 24 --n-head 16 --seq-len 2048 --n-inner 8192 --num-experts 8 \
    --top-k 2 --moe-every 2 --vocab-size 50304 --capacity-factor 1.0 --batch "$B" \
    --steps "$STEPS" --warmup 2 ${TORCH_ARGS:-} | tee "$OUT/gpu_bench_torch.json"

"$PYTHON" - "$OUT/gpu_bench_ted.json" "$OUT/gpu_bench_torch.json" <<'EOF'
import json, sys
ted, pt = ([json.loads(l) for l in open(f) if l.startswith("{")][-1] for f in sys.argv[1:3])
print(f"summary: ted {ted['tokens_per_s']:.0f} tokens/s (mfu {ted['mfu']:.3f}), "
      f"torch {pt['tokens_per_s']:.0f} tokens/s (mfu {pt.get('mfu', 0):.3f}), "
      f"ted/torch {ted['tokens_per_s'] / pt['tokens_per_s']:.2f}x")
EOF
