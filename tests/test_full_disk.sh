#!/usr/bin/env bash
# test_full_disk.sh — no write ted makes fails silently. On a full disk (a 64 KB tmpfs mounted here,
# as root) each file a training run writes stops the run when it can no longer be written: exit 1,
# one "ted: FILE: write failed: No space left on device" line naming it, never exit 0 with a
# truncated file:
#  - the --log JSONL, the --tensorboard-dir event file, a csv_monitor file, a checkpoint
#  - the same under mpirun on 2 ranks (rank 0 writes; the other rank ends too, not left waiting)
#  - ted upcycle (a variant): a folder whose filesystem cannot hold the model is refused before
#    anything is written
# Needs root (mount); exits 77 (skipped) with the reason elsewhere. The --log case that needs no
# root (/dev/full) is in test_trust.sh.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks go on after a failed command
source tests/mpi_env.sh
mkdir -p "$TED_TMP/full"
F=$W/full
if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: mounting a small tmpfs needs root"; exit 77; fi
if ! mount -t tmpfs -o size=64k tmpfs "$F" 2>"$W/mount.err"; then
  echo "SKIPPED: cannot mount a tmpfs here: $(cat "$W/mount.err")"; exit 77
fi
trap 'umount "$F" 2>/dev/null' EXIT
M=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --seq-len 16 --micro-batch 2
   --num-experts 4 --top-k 2 --moe-every 2 --log-every 0 --eval-windows 2 --threads 1)

# full NAME NEEDLE CMD...: on an emptied tmpfs, CMD exits 1 and its last stderr line is NEEDLE's
# write failure (NEEDLE: a pattern for the file's path)
full() {
  local name=$1 needle=$2 rc=0; shift 2
  rm -rf "${F:?}"/* "$F"/.[!.]* 2>/dev/null
  "$@" </dev/null >"$W/out" 2>"$W/err" || rc=$?
  local line; line=$(grep '^ted: ' "$W/err" | tail -1)
  if [ "$rc" -eq 1 ] && [[ "$line" =~ ^ted:\ $needle:\ write\ failed:\ No\ space\ left\ on\ device ]]; then
    ok "$name: exit 1, $line"
  else bad "$name: exit $rc, $line"; tail -3 "$W/err"; fi
}

full "--log" "$F/log.jsonl" "$TED" train "${M[@]}" --steps 100000 --log "$F/log.jsonl"
full "--tensorboard-dir" "$F/tb/events\.out\.tfevents\.[^ ]*" "$TED" train "${M[@]}" --steps 100000 --tensorboard-dir "$F/tb"
printf '{"csv_monitor": {"enabled": true, "output_path": "%s", "job_name": "j"}}' "$F/csv" >"$W/csv.json"
full "csv_monitor" "$F/csv/j/[A-Za-z_.0-9]*\.csv" "$TED" train "${M[@]}" --steps 100000 --config "$W/csv.json"
full "a checkpoint" "$F/ck/\.step_00000001\.tmp\.[0-9]*/[a-z]*\.safetensors" "$TED" train "${M[@]}" --steps 3 --save "$F/ck" \
  --save-every 1
[ -z "$(ls "$F/ck" | grep step_)" ] && ok "the failed checkpoint left no step_ folder" || bad "checkpoint: $(ls -a "$F/ck")"
full "--log, 2 ranks" "$F/log2.jsonl" "${MPIRUN[@]}" -np 2 "$TED" train "${M[@]}" --steps 100000 --log "$F/log2.jsonl"

# ted upcycle: the folder's filesystem is checked for room before the model is built
rm -rf "${F:?}"/*
"$TED" train "${M[@]}" --num-experts 1 --steps 0 --save "$W/dense" >/dev/null 2>&1 || { echo "FAIL: setup"; exit 1; }
rc=0; "$TED" upcycle --load "$W/dense" --num-experts 8 --save "$F/up" >"$W/out" 2>"$W/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "^ted: upcycle: --save $F/up: needs [0-9]* bytes, its filesystem has [0-9]* free" "$W/err" &&
  [ ! -e "$F/up" ] && [ -z "$(ls -A "$F")" ] && ok "upcycle into a filesystem too small: $(cat "$W/err")" ||
  { bad "upcycle into a full filesystem: exit $rc"; cat "$W/err"; ls -A "$F"; }

summary
