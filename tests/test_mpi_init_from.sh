#!/usr/bin/env bash
# test_mpi_init_from.sh — --init-from in every layout takes each rank's slices of the folder's
# weights: an upcycled MoE (ted upcycle, E 4, top-2) trained for 6 steps from --init-from gives the
# one-process losses within 1e-5 under (tp 2, ep 2) and under (pp 2, ep 2) on 4 ranks, with DTD
# and CAC on under tp 2.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
T=$TED_TMP
M=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --seq-len 16
   --log-every 100 --eval-windows 4 --lr 3e-3 --warmup 2)
OMP_NUM_THREADS=1 "$TED" train "${M[@]}" --micro-batch 8 --steps 20 --save "$T/dense" >/dev/null
"$TED" upcycle --load "$T/dense" --num-experts 4 --top-k 2 --save "$T/moe" >/dev/null
run=("${M[@]}" --steps 6 --init-from "$T/moe")
OMP_NUM_THREADS=1 "$TED" train "${run[@]}" --micro-batch 8 --log "$T/one.jsonl" >/dev/null
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" train "${run[@]}" --micro-batch 4 --tp 2 --ep 2 --dtd --cac \
  --activation-checkpointing --log "$T/tp.jsonl" >/dev/null
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" train "${run[@]}" --micro-batch 4 --pp 2 --ep 2 --log "$T/pp.jsonl" >/dev/null
check "--init-from under tp 2, ep 2 (DTD, CAC) = one process" "$T/one.jsonl" "$T/tp.jsonl" 1e-5
check "--init-from under pp 2, ep 2 = one process" "$T/one.jsonl" "$T/pp.jsonl" 1e-5
summary
