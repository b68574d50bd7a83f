#!/bin/bash
# The non-blocking collectives (comm_i*, for overlap) against the blocking ones, on 1, 3 and 4 ranks.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
PROG="$(dirname "$TED")/comm_async"
"$PROG"
for n in 3 4; do OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np $n "$PROG"; done
