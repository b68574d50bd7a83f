#!/usr/bin/env bash
# The optimizer consumes the gradients on 2 data-parallel ranks: tests/test_grad_zero.c's checks
# under mpirun, where ZeRO-1 must also zero each tensor's parts outside the rank's shard, ZeRO-2
# its shard and buckets, overlap_comm and 1-bit Adam's compressed steps theirs.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
PROG="$(dirname "$TED")/test_grad_zero"
[ -x "$PROG" ] || { echo "$PROG: not built (it is tests/test_grad_zero.c)"; exit 1; }
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$PROG"
