#!/usr/bin/env bash
# test_frictions.sh — the small things a newcomer meets first, each with its check:
#  - ted shows up as "ted" in top/ps/pgrep (its re-execution for passive waiting keeps the name);
#  - ted --version and -V; a misspelt command gets "did you mean";
#  - --tp 2 on one process says to start it under mpirun -np 2;
#  - a finished `make train` run (scripts/train_moby.sh) run again says it is complete: no new run
#    record in the log, no samples again; ted train --resume of a finished run likewise, exit 0;
#  - ted compare of two runs whose settings differ names the settings; of two layouts, says nothing;
#  - bench --optimizer gives memcpy's rate as a reference (x, no percentage);
#  - plan says what its "M2 bound" is.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
TINY=(--data data/moby-dick.txt --n-layer 1 --n-embd 32 --n-head 2 --n-positions 32 --eval-windows 2)

# the process name after the re-execution (no OMP_WAIT_POLICY in the environment)
env -u OMP_WAIT_POLICY "$TED" train "${TINY[@]}" --steps 1000000 --log-every 0 >"$W/name.out" 2>&1 &
pid=$!
name=""
for _ in $(seq 100); do
  name=$(cat /proc/$pid/comm 2>/dev/null)
  grep -q "OMP_WAIT_POLICY=PASSIVE" /proc/$pid/environ 2>/dev/null && break
  sleep 0.1
done
name=$(cat /proc/$pid/comm 2>/dev/null)
kill $pid 2>/dev/null; wait $pid 2>/dev/null
expect "re-executed for passive waiting, the process is named ted (comm: $name)" '[ "$name" = ted ]'

v=$("$TED" --version); v2=$("$TED" -V); rc=$?
expect "ted --version and -V: $v" '[ $rc -eq 0 ] && grep -q "^ted [0-9]*\.[0-9]*\.[0-9]*, with" <<<"$v" && [ "$v" = "$v2" ]'
err=$("$TED" trian 2>&1); rc=$?
expect "ted trian: exit 2, did you mean train: $err" '[ $rc -eq 2 ] && grep -q "did you mean train?" <<<"$err"'
err=$("$TED" frobnicate 2>&1); rc=$?
expect "ted frobnicate: no guess: $err" '[ $rc -eq 2 ] && ! grep -q "did you mean" <<<"$err"'

err=$("$TED" train "${TINY[@]}" --steps 1 --tp 2 2>&1 >/dev/null); rc=$?
expect "--tp 2 on one process: exit 2, says mpirun -np 2: $err" \
  '[ $rc -eq 2 ] && [ $(wc -l <<<"$err") -eq 1 ] && grep -q "start ted under mpirun" <<<"$err" && grep -q "mpirun -np 2" <<<"$err"'

# make train's script, three times: trains and samples; then twice "already complete"
run_script() { OUT="$W/moby" TED="$TED" bash scripts/train_moby.sh --steps 2 --n-layer 1 --n-embd 32 --n-head 2 \
  --eval-windows 2 --log-every 1 >"$W/moby$1.out" 2>&1; }
run_script 1; rc1=$?
records1=$(grep -c '"run"' "$W/moby/log.jsonl")
run_script 2; rc2=$?
run_script 3; rc3=$?
records3=$(grep -c '"run"' "$W/moby/log.jsonl")
expect "make train: the first run trains and prints samples" '[ $rc1 -eq 0 ] && grep -q "^--- sample" "$W/moby1.out"'
expect "make train again on a finished run: exit 0, 'already complete', no samples, no new run record ($records1 -> $records3)" \
  '[ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && grep -q "already complete at step 2 (--steps 2)" "$W/moby3.out" &&
   ! grep -q "^--- sample" "$W/moby2.out" "$W/moby3.out" && [ "$records1" = "$records3" ]'
out=$("$TED" train --data data/moby-dick.txt --steps 2 --resume "$W/moby" 2>&1); rc=$?
# (start-up notes aside: the 2-step run is shorter than its warm-up, which the config's rules note)
expect "ted train --resume of a finished run: exit 0, one line: $out" \
  '[ $rc -eq 0 ] && [ $(grep -vc "^note: " <<<"$out") -eq 1 ] && grep -q "raise --steps" <<<"$out"'

# ted compare: settings that differ are named; a layout is not a setting
"$TED" train "${TINY[@]}" --steps 2 --log "$W/a.jsonl" >/dev/null 2>&1
"$TED" train "${TINY[@]}" --steps 2 --lr 1e-3 --seed 5 --log "$W/b.jsonl" >/dev/null 2>&1
"$TED" train "${TINY[@]}" --steps 2 --threads 1 --micro-batch 4 --grad-accum 2 --log "$W/c.jsonl" >/dev/null 2>&1
out=$("$TED" compare "$W/a.jsonl" "$W/b.jsonl")
expect "compare of unrelated runs names the settings: $(head -1 <<<"$out")" \
  'grep -q "^note: the runs. settings differ" <<<"$out" && grep -q "lr 0.0006 -> 0.001" <<<"$out" && grep -q "seed 1337 -> 5" <<<"$out"'
out=$("$TED" compare "$W/a.jsonl" "$W/c.jsonl")
expect "compare of two splits of the same batch: no note ($(head -1 <<<"$out"))" '! grep -q "^note" <<<"$out"'

out=$("$TED" bench --optimizer 100000 2>&1); rc=$?
expect "bench --optimizer: memcpy as a reference, x not %" \
  '[ $rc -eq 0 ] && grep -q "fp32  AdamW: .*x memcpy.s rate" <<<"$out" && ! grep -q "%" <<<"$out" && grep -q "not a ceiling" <<<"$out"'
out=$("$TED" plan --base-params 6.7B --experts 16 --gpus 128 --tp 4)
expect "plan explains the M2 bound" 'grep -q "M2 bound: its limit as the" <<<"$out" && "$TED" plan --help | grep -q "the M2 bound"'
summary
