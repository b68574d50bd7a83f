#!/usr/bin/env bash
# test_trust.sh — ted cannot fail silently (one process; the MPI cases are test_mpi_trust.sh).
# Each case is a failure that once went unnoticed; now it must give one clear line and a
# non-zero exit with nothing lost or overwritten:
#  - a checkpoint config.json with n_head 0 / moe_every 0 / n_layer -3 / num_experts 2^31-1 /
#    capacity_factor 1e30 / seq_len > n_positions: refused by ted generate, ted eval and --resume
#  - flags or a JSON config whose sizes overflow (a tensor past 2^31 elements, num_experts,
#    shared_experts or expert_inner near INT_MAX, a capacity factor that collapses capacity), or
#    a model whose fp32 training state exceeds this node's memory: refused before any allocation
#  - trainer_state.json: step past its run's steps, adam_t past step, a 2^60 step, a bad seed
#  - NaN/Inf weights or a negative Adam second moment in a checkpoint: refused, naming the tensor
#  - a run whose loss becomes NaN stops with one line naming step and loss, exit 1, and saves nothing
#  - fp16: 40 skipped steps in a row stop the run with a line saying which steps were skipped and
#    which checkpoints were saved meanwhile (with the last trained weights); skipped steps print
#    "loss skipped", not NaN
#  - a second run on a --save folder in use: exit 2 before training; the first run is intact
#  - a --save folder of another run: refused unless --overwrite; a --log of another run likewise; a new
#    run (no --resume) on a folder holding checkpoints of its own settings too; a resume keeps its run id
#    (another lr: a warning) and is refused a folder of another run; a running job's --log is locked
#  - trainer_state.json with a key twice
#  - --log on a full device stops the run naming it (exit 1); an empty tensorboard/csv_monitor
#    output_path is refused (it would write under /); a csv_monitor folder of another run is refused
#    unless --resume (appends) or --overwrite (replaces)
#  - a --save folder that cannot be written: refused before step 1
#  - leftover .step_*.tmp directories of an interrupted save are removed at the next start
#  - SIGTERM/SIGINT mid-run: the last complete step is saved, exit 128+sig, the save resumes
#  - --keep-last N keeps the N newest checkpoints
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
PY=/usr/bin/python3
BOOK=$TED_ROOT/data/moby-dick.txt
MODEL=(--data "$BOOK" --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --seq-len 16 --micro-batch 2
       --num-experts 4 --top-k 2 --moe-every 2 --eval-windows 2 --log-every 0)
fails=0 n=0
ok() { echo "ok    $1"; n=$((n + 1)); }
fail() { echo "FAIL  $1"; fails=$((fails + 1)); n=$((n + 1)); }
tree_sum() { (cd "$1" && find . -print | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum); }

# expect NAME CODE NEEDLE WATCH ARGS...: `ted ARGS` exits CODE with one stderr line holding NEEDLE,
# and the directory WATCH (or "-") is left byte for byte as it was
expect() {
  local name=$1 code=$2 needle=$3 watch=$4; shift 4
  local before="" rc=0 why=()
  [ "$watch" != - ] && before=$(tree_sum "$watch")
  "$TED" "$@" </dev/null >"$W/out" 2>"$W/err" || rc=$?
  [ "$rc" -eq "$code" ] || why+=("exit $rc, want $code")
  [ "$(wc -l <"$W/err")" -eq 1 ] || why+=("$(wc -l <"$W/err") stderr lines, want 1")
  grep -qiF -- "$needle" "$W/err" || why+=("no \"$needle\" in the message")
  [ "$watch" = - ] || [ "$before" = "$(tree_sum "$watch")" ] || why+=("$watch changed")
  if [ ${#why[@]} -eq 0 ]; then ok "$name: $(cat "$W/err")"
  else fail "$name: $(IFS=';'; echo "${why[*]}")"; sed 's/^/        /' "$W/err" | head -5; fi
}
run_ok() { "$TED" "$@" >"$W/out" 2>"$W/err" || { cat "$W/err"; echo "FAIL: setup: ted $*"; exit 1; }; }

# a checkpoint to corrupt
run_ok train "${MODEL[@]}" --steps 2 --save "$W/base"
CK=$W/base/step_00000002
# edit DIR FILE KEY VALUE: a copy of the checkpoint with one JSON key of FILE changed
edit() {
  rm -rf "$W/$1" && cp -a "$CK" "$W/$1"
  "$PY" - "$W/$1/$2" "$3" "$4" <<'EOF'
import json, sys
p, k, v = sys.argv[1:]
j = json.load(open(p)); t = j["ted"] if k in j.get("ted", {}) else j   # config.json: ted's keys in "ted"
t[k] = json.loads(v); json.dump(j, open(p, "w"))
EOF
}

# --- a checkpoint's config.json gets the training config's validation
for kv in "n_head 0" "moe_every 0" "n_layer -3" "num_experts 2147483647" "capacity_factor 1e30" "seq_len 1000" \
          "n_embd 4194304"; do
  set -- $kv
  edit cfg config.json "$1" "$2"
  expect "generate, config $1 $2" 2 "config.json" "$W/cfg" generate --load "$W/cfg" --tokens 2
  [ "$1" = n_head ] || [ "$1" = seq_len ] &&
    expect "eval, config $1 $2" 2 "$1" "$W/cfg" eval --load "$W/cfg" --data "$BOOK" --windows 2
  [ "$1" = moe_every ] && expect "resume, config $1 $2" 2 "$1" "$W/cfg" train "${MODEL[@]}" --steps 3 --resume "$W/cfg"
done

# --- a checkpoint whose config.json is a model past this node's memory (4096 blocks of a 2^20-wide FFN):
#     eval and generate refuse before allocating, with the numbers (model/memplan.h, as ted train)
edit big config.json n_inner 1048576
"$PY" -c "import json; p='$W/big/config.json'; j=json.load(open(p)); j['n_layer']=4096; json.dump(j, open(p, 'w'))"
expect "eval, a model past this node's memory" 2 "predicted memory: the model has" "$W/big" eval --load "$W/big" --data "$BOOK" --windows 2
expect "generate, a model past this node's memory" 2 "predicted memory: the model has" "$W/big" generate --load "$W/big" --tokens 2

# --- activations count: a small model (9 MB of state) at T 16384, micro-batch 512, is refused for its
#     dense attention (~18 TB of probabilities); at micro-batch 8 with a sparse layout's present blocks,
#     recompute and checkpointing it fits (under 1 GB), builds, and reports what it predicted as allocated
LONG=(--data "$BOOK" --n-layer 4 --n-embd 32 --n-head 8 --n-positions 16384 --seq-len 16384 --threads 1 --steps 0)
expect "activations past this node's memory" 2 "of activations (micro-batch 512, checkpointing off)" - train "${LONG[@]}" --micro-batch 512
LONG+=(--micro-batch 8)
printf '{"sparse_attention": {"mode": "fixed", "block": 64, "num_local_blocks": 4, "num_global_blocks": 1, "recompute": true}}' >"$W/sp16k.json"
run_ok train "${LONG[@]}" --config "$W/sp16k.json" --activation-checkpointing
if grep -q "activations predicted \([0-9]*\), allocated \1$" "$W/out"; then ok "sparse + recompute + checkpointing at T 16384 fits: $(grep -o 'activations predicted.*' "$W/out")"
else fail "sparse T 16384: $(grep -o 'activations predicted.*' "$W/out")"; fi

# --- sizes from flags and JSON, checked in 64 bits before any allocation
expect "num_experts near INT_MAX" 2 num_experts - train "${MODEL[@]}" --num-experts 2147483647
expect "shared_experts near INT_MAX" 2 "shared_experts (2147483647) x expert_inner" - train "${MODEL[@]}" \
  --shared-experts 2147483647
expect "expert_inner near INT_MAX" 2 "expert_inner (2147483647) must be in" - train "${MODEL[@]}" --expert-inner 2147483647
expect "shared_experts 100000" 2 "shared_experts (100000) x expert_inner" - train "${MODEL[@]}" --shared-experts 100000
expect "a shared-expert tensor past 2^31 elements" 2 "elements per shared-expert tensor" - train "${MODEL[@]}" \
  --n-embd 1024 --shared-experts 1000
expect "a model past this node's memory" 2 "predicted memory: the model has" - train "${MODEL[@]}" --n-embd 16384 \
  --n-inner 65536 --n-layer 64 --num-experts 64
expect "capacity_factor 1e30" 2 capacity_factor - train "${MODEL[@]}" --capacity-factor 1e30
expect "tensor past 2^31 elements" 2 "2^31" - train "${MODEL[@]}" --vocab-size 65536 --n-embd 65536 --n-head 1
expect "layers x experts" 2 "tensors" - train "${MODEL[@]}" --n-layer 4096 --num-experts 65536
printf '{"model": {"n_embd": 1048576, "n_head": 1, "n_layer": 4096, "n_inner": 1}}' >"$W/huge.json"
expect "model beyond memory (JSON)" 2 "memory" - train --data "$BOOK" --config "$W/huge.json"

# --- trainer state range checks
for kv in "step 3" "step 1152921504606846976" "adam_t 5" "adam_t -1" "steps 1e300" 'seed "12x"' \
          'data_order "random"'; do
  set -- $kv
  edit st trainer_state.json "$1" "$2"
  expect "trainer_state $1 $2" 2 "$1" "$W/st" train "${MODEL[@]}" --steps 4 --resume "$W/st"
done

# --- non-finite weights and optimizer state are refused on load, naming the tensor
poison() {  # DIR FILE TENSOR VALUE: sets the first element of TENSOR in FILE
  rm -rf "$W/$1" && cp -a "$CK" "$W/$1"
  "$PY" - "$W/$1/$2" "$3" "$4" <<'EOF'
import json, struct, sys
p, name, v = sys.argv[1], sys.argv[2], float(sys.argv[3])
raw = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", raw[:8])[0]
off = 8 + n + json.loads(raw[8:8 + n])[name]["data_offsets"][0]
raw[off:off + 4] = struct.pack("<f", v); open(p, "wb").write(raw)
EOF
}
poison nanw model.safetensors transformer.h.1.mlp.experts.2.c_fc.weight nan
expect "NaN weight, resume" 2 "transformer.h.1.mlp.experts.2.c_fc.weight" "$W/nanw" train "${MODEL[@]}" --steps 4 --resume "$W/nanw"
expect "NaN weight, generate" 2 "transformer.h.1.mlp.experts.2.c_fc.weight" "$W/nanw" generate --load "$W/nanw" --tokens 2
poison infw model.safetensors transformer.wte.weight inf
expect "Inf weight, eval" 2 "transformer.wte.weight" "$W/infw" eval --load "$W/infw" --data "$BOOK" --windows 2
poison nanm optimizer.safetensors transformer.h.0.attn.c_attn.weight.exp_avg nan
expect "NaN Adam m" 2 "c_attn.weight.exp_avg" "$W/nanm" train "${MODEL[@]}" --steps 4 --resume "$W/nanm"
poison negv optimizer.safetensors transformer.wpe.weight.exp_avg_sq -1
expect "negative Adam v" 2 "transformer.wpe.weight.exp_avg_sq" "$W/negv" train "${MODEL[@]}" --steps 4 --resume "$W/negv"

# --- a loss that becomes NaN stops the run at once, exit 1, and nothing of it is saved
rm -rf "$W/nan" && mkdir -p "$W/nan"
expect "NaN loss stops, fp32" 1 "step 2: lm_loss is" - train "${MODEL[@]}" --steps 20 --lr 1e30 --warmup 0 --clip 0 \
  --save "$W/nan/ck" --save-every 1 --log "$W/nan/log.jsonl"
[ "$(ls "$W/nan/ck" | grep step_)" = step_00000001 ] && [ "$(grep -c '"loss"' "$W/nan/log.jsonl")" -eq 2 ] &&
  ok "NaN loss: only the finite step 1 is saved, the log ends at the NaN step 2" ||
  fail "NaN loss: checkpoints $(ls "$W/nan/ck" | tr '\n' ' ')"
expect "NaN loss stops, bf16" 1 "lm_loss is" - train "${MODEL[@]}" --steps 20 --lr 1e30 --warmup 0 --clip 0 --bf16
rm -rf "$W/f16"
expect "fp16: overflow skipped until the bound" 1 "steps 2 to 41 were skipped and this one is not saved; step_00000002 to step_00000040 (every 1) were saved during them, each with the unchanged weights of step 1" \
  - train "${MODEL[@]}" --steps 100 --lr 1e30 --warmup 0 --clip 0 --fp16 --save "$W/f16" --save-every 1 --log-every 1
# steps 2..40 have progress lines (step 41 stops before its line)
[ "$(grep -c '^step .*| loss skipped (fp16 overflow, loss scale [0-9.e+]*) |.*norm overflow' "$W/out")" -eq 39 ] &&
  ! grep -qi "nan" "$W/out" && ok "fp16: the skipped steps show their loss as skipped, no NaN printed" ||
  fail "fp16: skipped steps printed as $(grep -m1 '^step     2' "$W/out")"

# --- the --save folder: one run at a time, its own run, writable, cleaned
S=$W/save
run_ok train "${MODEL[@]}" --steps 2 --save "$S"
# a new run (no --resume) on a folder holding checkpoints: refused, with these settings or others (another
# lr is another run: its run id differs), the folder left as it was
expect "a new run on a folder with this run's checkpoints" 2 "of a run with these settings" "$S" train "${MODEL[@]}" \
  --steps 3 --save "$S" --log "$W/refused.jsonl"
[ ! -e "$W/refused.jsonl" ] && ok "the refused run left no --log file" || fail "the refused run left $W/refused.jsonl"
expect "a new run with another lr on it" 2 "of another run (run id $(cat "$S/run_id"); this run" "$S" train "${MODEL[@]}" \
  --steps 2 --save "$S" --lr 1e-3
"$TED" train "${MODEL[@]}" --steps 1000000 --save "$S" --log "$W/long.jsonl" --overwrite >"$W/long.out" 2>"$W/long.err" &
pid=$!
for _ in $(seq 100); do [ -s "$W/long.jsonl" ] && break; sleep 0.1; done
expect "second run on a locked --save" 2 "in use by another ted run" "$S" train "${MODEL[@]}" --steps 2 --save "$S"
cp "$W/long.jsonl" "$W/long.before"
expect "--log of a running job, --overwrite" 2 "--log $W/long.jsonl: in use by another ted run" - train "${MODEL[@]}" \
  --steps 2 --log "$W/long.jsonl" --overwrite
cmp -s "$W/long.before" <(head -c "$(stat -c %s "$W/long.before")" "$W/long.jsonl") &&
  ok "the running job's log was not replaced" || fail "the running job's log was replaced"
kill -TERM $pid; wait $pid; rc=$?
last=$(ls "$S" | grep step_ | sort | tail -1)
[ "$rc" -eq 143 ] && grep -q "stopped by signal 15" "$W/long.err" && [ -n "$last" ] &&
  [ "$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$S/$last/trainer_state.json")" -eq \
    "$(grep -c '"loss"' "$W/long.jsonl")" ] && ok "SIGTERM: exit 143, $last saved (the last complete step)" ||
  { fail "SIGTERM: exit $rc, last $last"; cat "$W/long.err"; }
# the saved step resumes (appending to the run's log); a log of another run is refused
mkdir -p "$W/logs" && mv "$W/long.jsonl" "$W/logs/"
steps_before=$(grep -c '"loss"' "$W/logs/long.jsonl")
"$TED" train "${MODEL[@]}" --steps $((steps_before + 2)) --save "$W/s2" --resume "$S/$last" --log "$W/logs/long.jsonl" \
  >"$W/out" 2>"$W/err" && [ "$(grep -c '"loss"' "$W/logs/long.jsonl")" -eq $((steps_before + 2)) ] &&
  ok "resume after SIGTERM, appending to the log" || { fail "resume after SIGTERM"; cat "$W/err"; }
expect "--log of another run" 2 "--log" "$W/logs" train "${MODEL[@]}" --steps 2 --log "$W/logs/long.jsonl"
expect "--save of another run" 2 "another run" "$S" train "${MODEL[@]}" --steps 2 --save "$S" --seed 7
"$TED" train "${MODEL[@]}" --steps 2 --save "$S" --seed 7 --overwrite >"$W/out" 2>"$W/err" &&
  [ "$(ls "$S" | grep step_)" = step_00000002 ] && ok "--overwrite replaces the other run's checkpoints" ||
  fail "--overwrite: $(ls "$S")"
# a resumed run keeps its checkpoint's run id, with another lr too (a warning names it); it may not
# save into a folder of another run unless --overwrite
id7=$(cat "$S/run_id")
"$TED" train "${MODEL[@]}" --steps 3 --save "$S" --seed 7 --resume "$S" --lr 1e-3 >"$W/out" 2>"$W/err" &&
  [ "$(cat "$S/run_id")" = "$id7" ] && grep -q "\"run_id\": \"$id7\"" "$S/step_00000003/trainer_state.json" &&
  grep -q "lr 0.0006 -> 0.001" "$W/out" && ok "resume with another lr: run id $id7 kept, the change warned" ||
  { fail "resume with another lr: $(cat "$W/err")"; cat "$S/run_id"; }
run_ok train "${MODEL[@]}" --steps 2 --save "$W/other" --seed 9
expect "resume into a folder of another run" 2 "of another run (run id $(cat "$W/other/run_id")) than the one resumed ($id7)" \
  "$W/other" train "${MODEL[@]}" --steps 4 --seed 7 --resume "$S" --save "$W/other"
"$TED" train "${MODEL[@]}" --steps 4 --seed 7 --resume "$S" --save "$W/other" --overwrite >"$W/out" 2>"$W/err" &&
  [ "$(ls "$W/other" | grep step_)" = step_00000004 ] && [ "$(cat "$W/other/run_id")" = "$id7" ] &&
  ok "resume into another run's folder with --overwrite: its checkpoints replaced, run id $id7" ||
  fail "resume --overwrite: $(ls "$W/other") $(cat "$W/err")"
# trainer_state.json: a key twice is refused (cJSON would read the first, Python the last)
rm -rf "$W/dup" && cp -a "$CK" "$W/dup" && sed -i 's/^{"step": 2,/{"step": 2, "step": 1,/' "$W/dup/trainer_state.json"
expect "trainer_state.json with a key twice" 2 'key "step" appears twice' "$W/dup" train "${MODEL[@]}" --steps 4 --resume "$W/dup"
# an interrupted save's temporaries are removed at the next start
mkdir -p "$S/.step_00000009.tmp.12345" && echo partial >"$S/.step_00000009.tmp.12345/model.safetensors"
run_ok train "${MODEL[@]}" --steps 2 --save "$S" --seed 7 --overwrite
[ -z "$(ls -a "$S" | grep '^\.step_')" ] && ok "leftover .step_*.tmp removed" || fail "leftovers: $(ls -a "$S")"
# --keep-last 2
run_ok train "${MODEL[@]}" --steps 5 --save "$W/keep" --save-every 1 --keep-last 2
[ "$(ls "$W/keep" | grep step_ | tr '\n' ' ')" = "step_00000004 step_00000005 " ] && ok "--keep-last 2" ||
  fail "--keep-last 2: $(ls "$W/keep")"
# SIGINT the same way (exit 130), here without --save: nothing to save, still the signal's status
"$TED" train "${MODEL[@]}" --steps 1000000 --log "$W/int.jsonl" >"$W/int.out" 2>"$W/int.err" &
pid=$!
for _ in $(seq 100); do [ -s "$W/int.jsonl" ] && break; sleep 0.1; done
kill -INT $pid; wait $pid; rc=$?
[ "$rc" -eq 130 ] && ok "SIGINT: exit 130" || fail "SIGINT: exit $rc"
# an unwritable --save folder is found before step 1 (root writes anywhere: run as nobody then)
# nobody may not enter the clone's folders (a clone under /root, a mode-700 folder): the binary,
# the data and the folder go to a folder of their own under /tmp that anyone can enter
RO=$(mktemp -d /tmp/ted-ro.XXXXXX) && chmod 755 "$RO" && cp "$TED" "$BOOK" "$RO/" && chmod 755 "$RO/$(basename "$TED")"
mkdir -p "$RO/ro" && chmod 555 "$RO/ro" && chmod 644 "$RO/$(basename "$BOOK")"
as=()
[ "$(id -u)" -eq 0 ] && as=(setpriv --reuid 65534 --regid 65534 --clear-groups)
rc=0
"${as[@]}" "$RO/$(basename "$TED")" train "${MODEL[@]}" --data "$RO/$(basename "$BOOK")" --steps 2 --save "$RO/ro" \
  >"$W/ro.out" 2>"$W/ro.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--save $RO/ro" "$W/ro.err" && ! grep -q "^model:" "$W/ro.out" &&
  ok "read-only --save refused before training: $(cat "$W/ro.err")" || { fail "read-only --save: exit $rc"; cat "$W/ro.err"; }
rm -rf "$RO"

# --- every file a run writes is checked: a failed write stops the run naming the file (exit 1); the
#     full-disk cases of the other files are test_full_disk.sh (a tmpfs, as root)
expect "--log on a full device" 1 "/dev/full: write failed: No space left on device" - train "${MODEL[@]}" --steps 3 \
  --log /dev/full
# DeepSpeed's metrics sections write under output_path/job_name: an empty output_path is refused (it
# would write under /), and a folder holding another run's metrics is refused as --log is
job=ted-trust-$$
for sec in tensorboard csv_monitor; do
  printf '{"%s": {"enabled": true, "output_path": "", "job_name": "%s"}}' "$sec" "$job" >"$W/empty.json"
  expect "$sec.output_path empty" 2 "$sec.output_path is empty" - train "${MODEL[@]}" --steps 1 --config "$W/empty.json"
  [ ! -e "/$job" ] || { fail "$sec: /$job was written"; rm -rf "/${job:?}"; }
done
printf '{"csv_monitor": {"enabled": true, "output_path": "%s", "job_name": "j"}}' "$W/csv" >"$W/csv.json"
run_ok train "${MODEL[@]}" --steps 2 --config "$W/csv.json" --save "$W/csvck"
expect "csv_monitor folder of another run" 2 "csv_monitor $W/csv/j: holds" "$W/csv" train "${MODEL[@]}" --steps 3 \
  --config "$W/csv.json"
run_ok train "${MODEL[@]}" --steps 3 --config "$W/csv.json" --save "$W/csvck" --resume "$W/csvck"
[ "$(cut -d, -f1 "$W/csv/j/Train_loss.csv" | tr '\n' ' ')" = "step 1 2 3 " ] && ok "csv_monitor: --resume goes on in the files" ||
  fail "csv_monitor --resume: $(cat "$W/csv/j/Train_loss.csv")"
run_ok train "${MODEL[@]}" --steps 1 --config "$W/csv.json" --overwrite
[ "$(cut -d, -f1 "$W/csv/j/Train_loss.csv" | tr '\n' ' ')" = "step 1 " ] && ok "csv_monitor: --overwrite replaces the files" ||
  fail "csv_monitor --overwrite: $(cat "$W/csv/j/Train_loss.csv")"

# --- ted compare and the debug switch refuse what they cannot do
echo 'not json' >"$W/notjson.jsonl"
expect "compare: a line that is not JSON" 2 "notjson.jsonl: line 1" - compare "$W/notjson.jsonl" "$W/logs/long.jsonl"
expect "compare: a missing log" 2 "no-such.jsonl" - compare "$W/logs/long.jsonl" "$W/no-such.jsonl"
expect "--debug-expert-grad-scale with bf16" 2 "--debug-expert-grad-scale" - train "${MODEL[@]}" --steps 1 --bf16 \
  --debug-expert-grad-scale 2
rc=0; "$TED" compare "$W/logs/long.jsonl" "$W/logs/long.jsonl" >"$W/out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] && grep -q "no divergence" "$W/out" && ok "compare: a log against itself" || fail "compare: itself: exit $rc"

echo
echo "test_trust: $((n - fails)) of $n passed"
[ "$fails" -eq 0 ]
