#!/usr/bin/env bash
# TED over MPI equals one process (issue 3, must-show 1): 20 fp32 steps, sequential data,
# E = 8, top-2, in capacity and dropless mode; every layout below gives per-step losses and
# final weights within 1e-5 of the single-process run.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
GLOBAL=8   # sequences per micro-step over all data-parallel ranks
model=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 8 --n-positions 32
       --seq-len 16 --grad-accum 2 --num-experts 8 --top-k 2 --moe-every 1 --min-capacity 1 --steps 20 --lr 3e-3
       --warmup 4 --eval-every 10 --eval-windows 16 --log-every 100)
model+=("${STATED_PEAK[@]}")   # no MFU is checked here (tests/mpi_env.sh)
for mode in capacity dropless; do
  cf=1.0; [ $mode = dropless ] && cf=0
  ref=$TED_TMP/$mode-single
  OMP_NUM_THREADS=1 "$TED" train "${model[@]}" --capacity-factor $cf --micro-batch $GLOBAL --log $ref.jsonl --save $ref >/dev/null
  for layout in "2 2 1" "2 1 2" "4 2 2" "4 4 1" "4 1 4" "4 2 1" "4 1 2" "8 2 4" "8 4 2" "8 2 2" "8 1 8" "8 8 1"; do
    read -r np tp ep <<<"$layout"
    dp=$((np / tp)); out=$TED_TMP/$mode-np$np-tp$tp-ep$ep
    if "${MPIRUN[@]}" -np "$np" "$TED" train "${model[@]}" --capacity-factor $cf --micro-batch $((GLOBAL / dp)) \
         --tp "$tp" --ep "$ep" --log "$out.jsonl" --save "$out" >"$out.out" 2>&1 \
       && l=$(compare_logs "$ref.jsonl" "$out.jsonl" 1e-5) \
       && w=$(compare_weights "$ref/step_00000020/model.safetensors" "$out/step_00000020/model.safetensors" 1e-5); then
      echo "ok   $mode np $np tp $tp ep $ep: losses $l, weights $w"; pass=$((pass + 1))
    else
      echo "FAIL $mode np $np tp $tp ep $ep"; tail -3 "$out.out"; fail=$((fail + 1))
    fi
  done
done
summary
