#!/usr/bin/env bash
# One rank failing ends the whole job within seconds, with the message, never a hang:
# a bad data file on one rank, a rank killed by a signal, a rank out of memory.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
source tests/mpi_env.sh
export TED
small=(--n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --seq-len 16 --micro-batch 2 --num-experts 4 --ep 2)
check() {  # name, wanted pattern on stderr, command...
  local name=$1 want=$2; shift 2
  local t0=$SECONDS rc
  timeout 120 "$@" >"$TED_TMP/out" 2>"$TED_TMP/err"; rc=$?
  local took=$((SECONDS - t0))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "$want" "$TED_TMP/err" && [ $took -lt 60 ]; then
    echo "ok   $name: exit $rc after ${took}s: $(grep -m1 "$want" "$TED_TMP/err")"; pass=$((pass + 1))
  else
    echo "FAIL $name: exit $rc after ${took}s"; tail -5 "$TED_TMP/err"; fail=$((fail + 1))
  fi
}
# rank 1 is given a file that does not exist: every rank stops at the agreement, one line
check "bad file on one rank" "ted: $TED_TMP/missing.txt: cannot read" \
  "${MPIRUN[@]}" -np 2 bash -c 'd=data/moby-dick.txt; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && d='"$TED_TMP"'/missing.txt; exec "$TED" train --data "$d" "$@"' _ "${small[@]}"
n=$(grep -c "^ted:" "$TED_TMP/err"); [ "$n" -eq 1 ] || { echo "FAIL: $n ted lines, want 1"; fail=$((fail + 1)); }
# rank 1 is killed in the middle of a long run: mpirun takes the others down
check "rank killed by SIGKILL" "signal 9\|Killed\|killed" \
  "${MPIRUN[@]}" -np 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && (sleep 3; kill -9 $$) & exec "$TED" train --data data/moby-dick.txt --steps 100000 "$@"' _ "${small[@]}"
# rank 1 cannot allocate its activations: it says so and aborts the job
check "out of memory on one rank" "ted: out of memory" \
  "${MPIRUN[@]}" -np 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && ulimit -v 1500000; exec "$TED" train --data data/moby-dick.txt --steps 5 "$@"' _ \
  --n-layer 4 --n-embd 256 --n-head 4 --n-positions 256 --seq-len 256 --micro-batch 128 --num-experts 4 --ep 2
summary
