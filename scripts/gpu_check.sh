#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in one call on a lent GPU machine, from a build carried from a
# CPU machine (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90; carry
# build/ted, build/test_cuda_*, build/flash_bench, .debs/ from scripts/device_deps.sh fetch,
# data/moby-dick.txt). Within BUDGET seconds (300), each step under its own timeout so that one
# failing or hanging step loses no other's result:
#   card       nvidia-smi: name, driver, clocks (-q -d CLOCK), the libraries the build found
#   ops        the op tests (test_cuda_kernels, test_cuda_moe, any build/test_cuda_* carried): every
#              CUDA op against its CPU op
#   train      tests/test_cuda_train.sh: whole GPU runs against the CPU, 4 ranks sharing the GPU,
#              resume (as many of its checks as its time allows: the log says which ran)
#   sanitizer  compute-sanitizer memcheck over 3-step GPU trainings (fp32 capacity, bf16 dropless),
#              racecheck over the op tests
#   flash      build/flash_bench: the flash-attention kernels and the fused classifier alone (ms,
#              TFLOP/s at T 2048, hd 128, 16 heads, batch 2, beside the T x T path), once more
#              with one buffer a streamed tile (TED_FLASH_BUFFERS=1: against the default two); and
#              build/gemm_shape_bench when carried (cuBLAS's host time a GEMM call, new shapes or not),
#              build/lt_algos when carried (each cuBLASLt candidate's speed at the experts' shapes);
#              and where the machine has Nsight Compute (ncu), its sections over the bf16 flash kernels
#   bench      bench/gpu_bench.sh (ted against eager PyTorch, about 170 s), given what is left
# ops, train and sanitizer run side by side; flash and the bench run alone after them. One JSON line per
# step on stdout; every log in $OUT/gpu_check.tar.gz (OUT: the device tool's folder, else
# build/gpu_check). CHECKS picks steps ("card ops train sanitizer bench"); REBUILD=1 builds here
# first (needs the toolkit and cmake). Exit status 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
ROOT=$PWD TED=${TED:-$PWD/build/ted}
BIN=$(dirname "$TED")
OUT=${OUT:-build/gpu_check} BUDGET=${BUDGET:-300} CHECKS=${CHECKS:-card ops train sanitizer flash bench}
BENCH_S=${BENCH_S:-180}
export TED
# shellcheck source=scripts/gpu_lib.sh
source scripts/gpu_lib.sh
if [ "${REBUILD:-0}" = 1 ]; then
  if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && make -C build -j"$(nproc)"; } >/dev/null
  then echo "gpu_check: the rebuild failed" >&2; exit 2; fi
fi
chmod +x "$TED" "$BIN"/test_cuda_* "$BIN"/flash_bench "$BIN"/gemm_shape_bench "$BIN"/lt_algos 2>/dev/null   # if the copy lost modes
gpu_require gpu_check
DEADLINE=$((EPOCHSECONDS + BUDGET - 5)) LOGS=$(mktemp -d)/gpu_check
mkdir -p "$LOGS" "$OUT"
gpu_setup
has() { [[ " $CHECKS " == *" $1 "* ]]; }
san=$(command -v compute-sanitizer || true)
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -n 1 || true)

card() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
  nvidia-smi -q -d CLOCK
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; ldd "$TED" || true
}
sanitize() {   # sanitize TOOL PROGRAM ARGS...
  [ -n "$san" ] || { echo "no compute-sanitizer on PATH"; return 3; }
  "$san" --tool "$1" --error-exitcode 9 "${@:2}"
}
# Nsight Compute over the first launch of each bf16 flash kernel of flash_bench: how near the
# tensor cores and memory it runs, its occupancy and where its warps stall (a diagnostic: ncu's
# own exit status, counters refused say, is in its log and does not fail the step)
ncu_flash() {
  "$ncu" --kernel-name regex:'mma_(forward|dq|dkv)_kernel' --launch-count 3 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats "$BIN/flash_bench" --reps 2 --baseline 0 --V 0
  echo "ncu exit status $?"
}
export -f card sanitize ncu_flash
export san ncu BIN
ops=()   # the op tests carried: every test_cuda_* program beside ted but the emulator's
for t in "$BIN"/test_cuda_*; do [[ -x $t && $t != *_emu ]] && ops+=("$t"); done
tiny=(train --device cuda --data data/moby-dick.txt --n-layer 2 --n-embd 64 --n-head 4 --n-positions 64 --seq-len 32
      --micro-batch 4 --num-experts 4 --top-k 2 --moe-every 1 --steps 3 --eval-windows 4)

{
  has card && step card 20 card
  RESERVE=$(has bench && echo "$BENCH_S" || echo 0)
  if has ops; then for t in "${ops[@]}"; do step "ops_${t##*/test_cuda_}" 60 "$t"; done; fi &
  if has train; then
    TED_ROOT=$ROOT TED_TMP=/tmp/ted_cuda_train OMP_NUM_THREADS=4 step train 150 bash tests/test_cuda_train.sh
  fi &
  if has sanitizer; then
    step memcheck_train_fp32 60 sanitize memcheck "$TED" "${tiny[@]}"
    step memcheck_train_bf16 60 sanitize memcheck "$TED" "${tiny[@]}" --bf16 --capacity-factor 0
    for t in "${ops[@]}"; do step "racecheck_${t##*/test_cuda_}" 60 sanitize racecheck "$t"; done
  fi &
  wait
  has train && mkdir -p "$LOGS/train_logs" && cp /tmp/ted_cuda_train/*.jsonl "$LOGS/train_logs/" 2>/dev/null
  has flash && step flash_bench 30 "$BIN/flash_bench"
  has flash && TED_FLASH_BUFFERS=1 step flash_bench_1buf 20 "$BIN/flash_bench" --baseline 0 --V 0
  has flash && [ -x "$BIN/gemm_shape_bench" ] && step gemm_shape_bench 30 "$BIN/gemm_shape_bench"
  has flash && [ -x "$BIN/lt_algos" ] && step lt_algos 30 "$BIN/lt_algos"
  has flash && [ -n "$ncu" ] && step ncu_flash 40 ncu_flash
  RESERVE=0 left=$((DEADLINE - EPOCHSECONDS))
  has bench && OUT=$LOGS/bench BENCH_BUDGET=$((left < BENCH_S ? left : BENCH_S)) step bench "$BENCH_S" bash bench/gpu_bench.sh
} | tee "$LOGS/summary.jsonl"
[ -f "$LOGS/bench.txt" ] && sed -n '/^card: /,$p' "$LOGS/bench.txt"
tar -czf "$OUT/gpu_check.tar.gz" -C "$(dirname "$LOGS")" gpu_check
count() { grep -cE "\"status\": \"($1)\"" "$LOGS/summary.jsonl"; }
echo "gpu_check: $(count ok) steps ok, $(count 'fail|timeout') failed or timed out, $(count skipped) skipped;" \
  "logs in $OUT/gpu_check.tar.gz"
[ "$(count 'fail|timeout')" -eq 0 ]
