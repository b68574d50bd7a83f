#!/usr/bin/env bash
# Checkpoints are layout-free (issue 3, must-show 2): a checkpoint saved at step 10 by
# (tp 2, ep 2) on 4 ranks resumes under (tp 1, ep 4) on 4 ranks and under one process, and
# steps 11-20 reproduce the uninterrupted run's losses within 1e-5.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
model=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32
       --seq-len 16 --grad-accum 2 --num-experts 8 --top-k 2 --moe-every 1 --min-capacity 1 --steps 20 --lr 3e-3
       --warmup 4 --log-every 100)
T=$TED_TMP
"${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --micro-batch 4 --tp 2 --ep 2 --save-every 10 --save $T/a --log $T/a.jsonl >/dev/null
grep -v '"step":[0-9],\|"step":10,' $T/a.jsonl > $T/a_11_20.jsonl
"${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --micro-batch 2 --tp 1 --ep 4 --resume $T/a/step_00000010 --log $T/b.jsonl >/dev/null
OMP_NUM_THREADS=1 "$TED" train "${model[@]}" --micro-batch 8 --resume $T/a/step_00000010 --log $T/c.jsonl >/dev/null
fails=0
for r in b c; do
  if d=$(compare_logs $T/a_11_20.jsonl $T/$r.jsonl 1e-5); then echo "ok   resume under $([ $r = b ] && echo 'tp 1 ep 4' || echo 'one process'): steps 11-20 within $d"
  else echo "FAIL resume $r"; fails=$((fails + 1)); fi
done
echo "$((2 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
