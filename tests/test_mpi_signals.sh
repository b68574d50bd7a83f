#!/usr/bin/env bash
# test_mpi_signals.sh — a stop asked through mpirun, or of one rank, ends the job at a step that
# every rank saved, with one `ted:` line (docs/trust.md, "Stopping a run"). 4 ranks, tp 2 × ep 2:
#  - SIGUSR1 to mpirun (forwarded to every rank): the line names SIGUSR1 and the saved step, which
#    is the last step logged; exit 138. Resumed to 3 steps further, the run logs the losses, norms
#    and the final val_loss of an unbroken run, bit for bit (a constant lr after warm-up, so that
#    --steps does not change the schedule).
#  - SIGTERM to mpirun, and Ctrl-C (SIGINT): mpirun sends its ranks SIGCONT, then SIGTERM and SIGKILL
#    odls_base_sigkill_timeout s apart. The ranks stop at the SIGCONT: the line names mpirun, the
#    step saved whole is the last logged; mpirun exits 1. Ctrl-C under Open MPI's default timeout (1 s).
#  - Ctrl-Z (SIGTSTP to mpirun, which stops the ranks with SIGSTOP), 2 s once every rank is stopped,
#    then SIGCONT to mpirun: the SIGCONT that resumes is no stop, the run goes on; SIGUSR2 then ends
#    it without --save: exit 140, "nothing saved".
#  - SIGTERM to rank 1 alone (not through mpirun), every step evaluating and saving: every rank
#    stops at the same step, saved whole; exit 143.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
source tests/mpi_env.sh
export TED
echo '{"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}}}' >"$W/const.json"
model=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --seq-len 16 --micro-batch 2
       --num-experts 4 --tp 2 --ep 2 --log-every 0 --eval-windows 2 --config "$W/const.json")
bad() { echo "FAIL $*"; tail -5 "$W/err"; fail=$((fail + 1)); }
steps() { cat "$1" 2>/dev/null | grep -c '"loss"'; }   # the training steps logged (0 before the log exists)
ted_lines() { grep -c '^ted:' "$W/err"; }

# start NAME [mpirun options] -- [ted options]: ted train on 4 ranks in the background (pid in $mpid),
# logging to $W/NAME.jsonl; returns once a step is logged. Each rank writes its pid to $W/NAME.pid.RANK.
start() {
  local name=$1; shift
  local mpi=()
  while [ "$1" != -- ]; do mpi+=("$1"); shift; done
  shift
  rm -rf "${W:?}/$name"* && mkdir -p "$W/$name"
  "${MPIRUN[@]}" "${mpi[@]}" -np 4 bash -c 'echo $$ >"$0.pid.$OMPI_COMM_WORLD_RANK"; exec "$TED" train "$@"' "$W/$name" \
    "${model[@]}" --steps 1000000 --log "$W/$name.jsonl" "$@" >"$W/out" 2>"$W/err" &
  mpid=$!
  for _ in $(seq 300); do [ "$(steps "$W/$name.jsonl")" -ge 1 ] && break; sleep 0.2; done
}
# saved_whole DIR: the newest step_N of DIR, if every rank's part of it is there and no save was left half-way
saved_whole() {
  local last; last=$(ls "$1" 2>/dev/null | grep '^step_' | tail -1)
  [ -n "$last" ] && [ -z "$(ls -A "$1" | grep '\.tmp')" ] &&
    "$TED" eval --load "$1/$last" --data data/moby-dick.txt --windows 2 >/dev/null 2>&1 && echo "$last"
}

# --- SIGUSR1 to mpirun; the saved step resumes bit for bit
start usr1 -- --save "$W/usr1/ck"
kill -USR1 $mpid; wait $mpid; rc=$?
k=$(steps "$W/usr1.jsonl"); want=$(printf 'step_%08d' "$k")
line=$(grep '^ted:' "$W/err")
[ "$rc" -eq 138 ] && [ "$(ted_lines)" -eq 1 ] && [ "$(saved_whole "$W/usr1/ck")" = "$want" ] &&
  [ "$line" = "ted: stopped by SIGUSR1 after step $k; saved $W/usr1/ck/$want (continue with --resume $W/usr1/ck/$want)" ] &&
  ok "SIGUSR1 to mpirun: exit 138, $want saved whole: $line" || bad "SIGUSR1 to mpirun: exit $rc, want $want: $line"
"${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --steps $((k + 3)) --log "$W/whole.jsonl" >"$W/whole.out" 2>&1 &
whole=$!   # (beside the resumed run: their start-ups overlap)
"${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --steps $((k + 3)) --resume "$W/usr1/ck/$want" --log "$W/resumed.jsonl" \
  >"$W/out" 2>"$W/err" || bad "resume from $want"
wait $whole || { cat "$W/whole.out"; bad "the unbroken run"; }
"$PY3" - "$W/usr1.jsonl" "$W/resumed.jsonl" "$W/whole.jsonl" "$k" <<'PY' && ok "resumed after SIGUSR1: steps 1-$((k + 3)) equal the unbroken run's, bit for bit" || bad "resumed after SIGUSR1 differs from the unbroken run"
import json, sys
def read(p):   # step -> its numbers as their exact text
    out = {}
    for l in open(p):
        o = json.loads(l, parse_float=str, parse_int=str)
        if "run" in o: continue
        s = int(o["step"])
        keys = ("val_loss",) if "val_loss" in o else ("loss", "lm_loss", "aux_loss", "grad_norm", "lr")
        out.setdefault(s, {}).update({k: o[k] for k in keys})
    return out
cut, res, whole, k = read(sys.argv[1]), read(sys.argv[2]), read(sys.argv[3]), int(sys.argv[4])
both = {**cut, **res}
assert sorted(cut) == list(range(1, k + 1)) and sorted(res) == list(range(k + 1, k + 4)), (sorted(cut), sorted(res))
assert both == whole, next((s, both.get(s), whole.get(s)) for s in whole if both.get(s) != whole.get(s))
assert "val_loss" in whole[k + 3]
PY

# --- SIGTERM and Ctrl-C to mpirun: the ranks stop at mpirun's SIGCONT
for case in "TERM 2" "INT 1"; do
  set -- $case
  start "$1" --mca odls_base_sigkill_timeout "$2" -- --save "$W/$1/ck"
  kill -"$1" $mpid; wait $mpid; rc=$?
  k=$(steps "$W/$1.jsonl"); want=$(printf 'step_%08d' "$k")
  line=$(grep '^ted:' "$W/err")
  [ "$rc" -eq 1 ] && [ "$(ted_lines)" -eq 1 ] && [ "$(saved_whole "$W/$1/ck")" = "$want" ] &&
    [ "$line" = "ted: stopped by mpirun ending the job (it got SIGINT, SIGTERM or SIGHUP) after step $k; saved $W/$1/ck/$want (continue with --resume $W/$1/ck/$want)" ] &&
    ok "SIG$1 to mpirun (odls_base_sigkill_timeout $2): mpirun's exit 1, $want saved whole: $line" ||
    bad "SIG$1 to mpirun: exit $rc, want $want: $line"
done

# --- Ctrl-Z and SIGCONT to mpirun: the run goes on; SIGUSR2 ends it (no --save)
start tstp --
kill -TSTP $mpid
pids=$(cat "$W"/tstp.pid.* | tr '\n' ,)
for _ in $(seq 150); do [ "$(ps -o stat= -p "${pids%,}" | grep -c '^T')" -eq 4 ] && break; sleep 0.2; done
sleep 2; a=$(steps "$W/tstp.jsonl")   # every rank stopped for 2 s (over the 1 s that tells a resume)
kill -CONT $mpid
for _ in $(seq 150); do [ "$(steps "$W/tstp.jsonl")" -gt $((a + 2)) ] && break; kill -0 $mpid 2>/dev/null || break; sleep 0.2; done
b=$(steps "$W/tstp.jsonl")
kill -USR2 $mpid; wait $mpid; rc=$?
k=$(steps "$W/tstp.jsonl")
[ "$b" -gt $((a + 2)) ] && [ "$rc" -eq 140 ] && [ "$(ted_lines)" -eq 1 ] &&
  grep -qx "ted: stopped by SIGUSR2 after step $k; nothing saved (no --save)" "$W/err" &&
  ok "Ctrl-Z then SIGCONT: trained on from step $a to $b; SIGUSR2 then: exit 140, $(grep '^ted:' "$W/err")" ||
  bad "Ctrl-Z then SIGCONT: steps $a, then $b, exit $rc"

# --- SIGTERM to rank 1 alone, each step evaluated and saved: every rank stops at one step
start one -- --save "$W/one/ck" --save-every 1 --keep-last 2 --eval-every 1
kill -TERM "$(cat "$W/one.pid.1")"; wait $mpid; rc=$?
k=$(steps "$W/one.jsonl"); want=$(printf 'step_%08d' "$k")
[ "$rc" -eq 143 ] && [ "$(ted_lines)" -eq 1 ] && [ "$(saved_whole "$W/one/ck")" = "$want" ] &&
  grep -q "^ted: stopped by SIGTERM after step $k; saved " "$W/err" &&
  [ "$(grep -c '"val_loss"' "$W/one.jsonl")" -eq "$k" ] &&
  ok "SIGTERM to rank 1 (evaluating and saving every step): exit 143, $want saved whole by every rank" ||
  bad "SIGTERM to rank 1: exit $rc, want $want"
summary
