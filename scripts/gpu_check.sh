#!/usr/bin/env bash
# The GPU checks of the CUDA backend, for a machine with an NVIDIA GPU (sm_80 or sm_90):
#   1. builds with the CUDA backend forced on;
#   2. the CUDA tests: every CUDA op against its CPU op (test_cuda_kernels, test_cuda_moe,
#      test_cuda_fused) and whole runs against the CPU (test_cuda_train); then bench/flash_bench
#      (the flash-attention kernels alone: ms and TFLOP/s at T 2048, hd 128, 16 heads, batch 2);
#   3. compute-sanitizer (memcheck, then racecheck on the op tests) over the op tests and a short
#      GPU training run: any reported error fails;
#   4. bench/gpu_bench.sh (the GPT-3-style benchmark against eager PyTorch) when BENCH=1.
# Usage: bash scripts/gpu_check.sh    (outputs under ${OUT:-build/gpu_check}; with .debs/ from
# `scripts/device_deps.sh fetch` present, it first installs the build dependencies from them)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu_check}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
# a bare device machine: the build dependencies carried as .debs (scripts/device_deps.sh fetch)
[ -d .debs ] && bash scripts/device_deps.sh install
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTED_CUDA=ON >/dev/null
make -C build -j"$(nproc)" >/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
(cd build && ctest --output-on-failure -R cuda) 2>&1 | tee "$OUT/ctest_cuda.txt"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
build/flash_bench 2>&1 | tee "$OUT/flash_bench.json" || { echo "FAIL flash_bench"; status=1; }
for t in test_cuda_kernels test_cuda_moe test_cuda_fused; do
  for tool in memcheck racecheck; do
    "$san" --tool $tool --error-exitcode 9 "build/$t" >"$OUT/sanitizer_${t}_$tool.txt" 2>&1 \
      && echo "ok   compute-sanitizer $tool $t" || { echo "FAIL compute-sanitizer $tool $t"; status=1; }
  done
done
"$san" --tool memcheck --error-exitcode 9 build/ted train --device cuda --data data/moby-dick.txt --n-layer 2 \
  --n-embd 64 --n-head 4 --n-positions 64 --seq-len 32 --micro-batch 4 --num-experts 4 --top-k 2 --moe-every 1 \
  --steps 3 --eval-windows 4 >"$OUT/sanitizer_train.txt" 2>&1 \
  && echo "ok   compute-sanitizer memcheck ted train" || { echo "FAIL compute-sanitizer memcheck ted train"; status=1; }
[ "${BENCH:-0}" = 1 ] && OUT=$OUT bash bench/gpu_bench.sh
exit $status
