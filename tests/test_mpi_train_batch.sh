#!/usr/bin/env bash
# test_mpi_train_batch.sh — DeepSpeed's train_batch_size under data parallelism: with 4 ranks
# and tp 2 (dp 2), train_batch_size 8 = micro_batch 2 x grad_accum 2 x dp 2 trains; 4 is
# refused on every rank with exit 2 and one line giving the product.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
M=(--data data/moby-dick.txt --n-layer 1 --n-embd 16 --n-head 2 --n-positions 16 --micro-batch 2 --grad-accum 2 --tp 2
   --steps 1 --eval-windows 2)
echo '{"train_batch_size": 8}' >"$W/ok.json"
echo '{"train_batch_size": 4}' >"$W/bad.json"
"${MPIRUN[@]}" -np 4 "$TED" train --config "$W/ok.json" "${M[@]}" >"$W/ok.out" 2>&1 || { cat "$W/ok.out"; fail "consistent refused"; }
grep -q "global batch 8 sequences" "$W/ok.out" || fail "no global batch 8"
rc=0
"${MPIRUN[@]}" -np 4 "$TED" train --config "$W/bad.json" "${M[@]}" >"$W/bad.out" 2>"$W/bad.err" || rc=$?
[ $rc -eq 2 ] || fail "exit $rc, expected 2"
grep -c "train_batch_size 4 does not equal micro_batch 2 x gradient_accumulation_steps 2 x dp 2 = 8" "$W/bad.err" | grep -qx 1 ||
  { cat "$W/bad.err"; fail "not one line with the numbers"; }
echo "ok   train_batch_size 8 runs with 4 ranks (dp 2); 4 refused: $(grep train_batch_size "$W/bad.err")"
