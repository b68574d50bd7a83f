#!/usr/bin/env bash
# test_threads.sh — threads on a shared machine: with no OMP_WAIT_POLICY in the environment ted
# runs with PASSIVE (it sets it and re-executes itself, since libgomp reads it only at load);
# a policy the environment names stands. --threads on eval and generate: a bad count is refused
# with one line and exit 2; eval gives the same loss on 1 and 2 threads.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
small=(--steps 1 --n-layer 1 --n-embd 32 --n-head 2 --n-positions 32 --seq-len 32 --micro-batch 2 --num-experts 2
       --threads 2)
policy() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["omp_wait_policy"])'; }
p=$(env -u OMP_WAIT_POLICY "$TED" bench "${small[@]}" 2>/dev/null | policy)
expect "no policy in the environment: ted runs PASSIVE (got $p)" '[ "$p" = PASSIVE ]'
p=$(OMP_WAIT_POLICY=ACTIVE "$TED" bench "${small[@]}" 2>/dev/null | policy)
expect "OMP_WAIT_POLICY=ACTIVE stands (got $p)" '[ "$p" = ACTIVE ]'
"$TED" train --data data/moby-dick.txt --n-layer 1 --n-embd 32 --n-head 2 --n-positions 32 --steps 2 \
  --eval-windows 2 --save "$W/ck" >/dev/null 2>&1
for cmd in "generate --threads 0" "eval --data data/moby-dick.txt --threads x" "eval --data data/moby-dick.txt --threads -1"; do
  err=$("$TED" $cmd --load "$W/ck" 2>&1 >/dev/null); rc=$?
  expect "ted $cmd: exit 2, one line naming --threads" '[ $rc -eq 2 ] && [ $(wc -l <<<"$err") -eq 1 ] && grep -q -- "--threads" <<<"$err"'
done
l1=$("$TED" eval --load "$W/ck" --data data/moby-dick.txt --windows 8 --threads 1 2>/dev/null)
l2=$("$TED" eval --load "$W/ck" --data data/moby-dick.txt --windows 8 --threads 2 2>/dev/null)
expect "eval: the same loss on 1 and 2 threads ($l1 / $l2)" \
  '/usr/bin/python3 -c "import json,sys; a, b = (json.loads(x)[\"loss\"] for x in sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * abs(a))" "$l1" "$l2"'
out=$("$TED" generate --load "$W/ck" --tokens 8 --threads 2 2>&1 >/dev/null)
expect "generate --threads 2 runs" 'grep -q "^generated 8 tokens" <<<"$out"'
summary
