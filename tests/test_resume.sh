#!/usr/bin/env bash
# test_resume.sh — checkpoints resume bit-exactly, and a failed save never damages the last
# good checkpoint (design §3 determinism, §7 checkpoints "written atomically ... resume bit-exactly").
#
# (a) For a MoE model with gradient accumulation 2, in shuffled order (the whole book) and in
#     sequential order (a 4 KB excerpt, so that the window numbering wraps around during steps
#     11-20): a 20-step run with --save-every 10, and a run resumed from its step-10 checkpoint
#     (--resume given the parent directory: the newest step) to step 20 log the same
#     loss, lm_loss, aux_loss, grad_norm, lr and dropped_frac for steps 11-20 and the same
#     val_loss at step 20, compared as exact strings, and write byte-identical step-20 files
#     (model.safetensors, optimizer.safetensors, config.json, trainer_state.json).
# (b) --steps 0 --save DIR writes DIR/step_00000000, which `ted eval` loads, and resuming it to
#     step 20 reproduces the uninterrupted 20-step run exactly (logs and files).
# (c) A save that fails part-way (a file-size limit, `ulimit -f`, makes a write fail with EFBIG
#     in the middle of optimizer.safetensors, or of model.safetensors; this works as root too,
#     where chmod does not stop writes): exit code non-zero and < 128, exactly one line on
#     stderr naming the file, the save root afterwards holds exactly what it held before
#     (byte-identical, no new entry), the old checkpoint gives the same `ted eval` output and is
#     what --resume picks; this holds also when the failing save would replace a checkpoint of
#     the same step. A later unconstrained save succeeds and matches the reference.
#     --save under a path whose parent is a regular file fails with one line, no crash.
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
PY=/usr/bin/python3
BOOK=$TED_ROOT/data/moby-dick.txt

[ -s "$BOOK" ] || fail "$BOOK is missing (bash scripts/setup.sh)"
head -c 4000 "$BOOK" >"$W/small.txt"   # 3600 training bytes: 112 windows of 32+1, fewer than 20 steps use

MODEL=(--n-layer 2 --n-embd 64 --n-head 4 --n-positions 64 --seq-len 32 --micro-batch 4 --num-experts 4
       --top-k 2 --moe-every 2 --grad-accum 2 --warmup 5 --eval-windows 16)

# train NAME ARGS...: a run that must succeed; its stdout/stderr go to $W/NAME.out/.err
train() {
  local name=$1; shift
  local rc=0
  "$TED" train "${MODEL[@]}" "$@" >"$W/$name.out" 2>"$W/$name.err" || rc=$?
  if [ "$rc" -ne 0 ]; then cat "$W/$name.err"; fail "$name: ted train exited with $rc"; fi
}

# same_steps A B FIRST LAST: B's training lines are exactly steps FIRST..LAST, and each has the
# same metric strings as A's line of that step; the val_loss lines of step LAST agree too.
same_steps() {
  "$PY" - "$@" <<'EOF'
import json, sys
a, b, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
KEYS = ('loss', 'lm_loss', 'aux_loss', 'grad_norm', 'lr', 'dropped_frac')
def read(path):
    train, val = {}, {}
    for n, line in enumerate(open(path), 1):
        o = json.loads(line, parse_float=str, parse_int=str)   # numbers kept as their exact text
        if 'run' in o: continue   # the run's settings
        step = int(o['step'])
        if 'val_loss' in o: val[step] = o['val_loss']
        else:
            if step in train: sys.exit(f'FAIL: {path}:{n}: step {step} logged twice')
            train[step] = o
    return train, val
ta, va = read(a)
tb, vb = read(b)
want = list(range(first, last + 1))
if sorted(tb) != want: sys.exit(f'FAIL: {b} has steps {sorted(tb)}, want {first}..{last}')
for s in want:
    if s not in ta: sys.exit(f'FAIL: {a} has no step {s}')
    for k in KEYS:
        if k not in ta[s] or k not in tb[s]: sys.exit(f'FAIL: step {s}: "{k}" is missing')
        if ta[s][k] != tb[s][k]:
            sys.exit(f'FAIL: step {s}: {k} {ta[s][k]} (uninterrupted) != {tb[s][k]} (resumed)')
if last not in va or last not in vb: sys.exit(f'FAIL: no val_loss line at step {last}')
if va[last] != vb[last]: sys.exit(f'FAIL: step {last}: val_loss {va[last]} != {vb[last]}')
print(f'  steps {first}-{last}: {len(KEYS)} metrics x {len(want)} steps and val_loss identical')
EOF
}

# same_ckpt A B: the two step directories hold byte-identical files
same_ckpt() {
  local f
  for f in model.safetensors optimizer.safetensors config.json trainer_state.json; do
    [ -f "$1/$f" ] || fail "$1/$f is missing"
    [ -f "$2/$f" ] || fail "$2/$f is missing"
    cmp -s "$1/$f" "$2/$f" || fail "$2/$f differs from $1/$f"
  done
  echo "  $2 == $1 (byte-identical)"
}

# ---------------------------------------------------------------------------------------
# (a) resume at step 10 == uninterrupted, shuffled and sequential
for order in shuffled sequential; do
  echo "== (a) $order order"
  data=$BOOK
  [ "$order" = sequential ] && data=$W/small.txt
  D=(--data "$data" --data-order "$order")
  train "full_$order" "${D[@]}" --steps 20 --save-every 10 --save "$W/full_$order" --log "$W/full_$order.jsonl"
  for s in 10 20; do [ -f "$W/full_$order/step_000000$s/model.safetensors" ] || fail "no step $s checkpoint"; done
  mkdir "$W/res_$order"
  cp -a "$W/full_$order/step_00000010" "$W/res_$order/"
  train "res_$order" "${D[@]}" --steps 20 --resume "$W/res_$order" --save "$W/res_$order" --log "$W/res_$order.jsonl"
  grep -q "resumed from .*step_00000010 at step 10" "$W/res_$order.out" || fail "$order: no 'resumed ... at step 10' line"
  same_steps "$W/full_$order.jsonl" "$W/res_$order.jsonl" 11 20
  same_ckpt "$W/full_$order/step_00000020" "$W/res_$order/step_00000020"
done

# ---------------------------------------------------------------------------------------
# (b) --steps 0 saves the initial weights as step 0; resuming them reproduces the full run
echo "== (b) --steps 0"
D=(--data "$BOOK" --data-order shuffled)
train s0 "${D[@]}" --steps 0 --save "$W/s0"
for f in model.safetensors optimizer.safetensors config.json trainer_state.json; do
  [ -f "$W/s0/step_00000000/$f" ] || fail "--steps 0: $W/s0/step_00000000/$f was not written"
done
"$TED" eval --load "$W/s0" --data "$BOOK" --windows 4 >"$W/s0.eval" 2>"$W/s0.eval.err" ||
  { cat "$W/s0.eval.err"; fail "ted eval cannot load the step-0 checkpoint"; }
"$PY" -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["windows"]==4 and o["loss"]>0, o' "$W/s0.eval" ||
  fail "ted eval of the step-0 checkpoint: $(cat "$W/s0.eval")"
train s0res "${D[@]}" --steps 20 --resume "$W/s0" --save "$W/s0" --log "$W/s0res.jsonl"
same_steps "$W/full_shuffled.jsonl" "$W/s0res.jsonl" 1 20
same_ckpt "$W/full_shuffled/step_00000020" "$W/s0/step_00000020"

# ---------------------------------------------------------------------------------------
# (c) a failing save keeps the last good checkpoint
echo "== (c) failed saves"
R=$W/root
mkdir "$R"
cp -a "$W/full_shuffled/step_00000010" "$R/"
"$TED" eval --load "$R" --data "$BOOK" --windows 4 >"$W/good.eval" 2>/dev/null || fail "eval of the good checkpoint"

# limited KB NAME ARGS...: ted train under a file-size limit of KB KiB (SIGXFSZ ignored, so a
# write past it fails with EFBIG as on a full disk); must fail cleanly with one line on stderr
limited() {
  local kb=$1 name=$2; shift 2
  local rc=0
  ( trap '' XFSZ; ulimit -f "$kb"; exec "$TED" train "${MODEL[@]}" "$@" ) >"$W/$name.out" 2>"$W/$name.err" || rc=$?
  echo "  $name: exit $rc: $(cat "$W/$name.err")"
  [ "$rc" -ne 0 ] || fail "$name: the save cannot have succeeded under ulimit -f $kb, yet exit code 0"
  [ "$rc" -lt 128 ] || fail "$name: killed by a signal (exit $rc)"
  [ "$(wc -l <"$W/$name.err")" -eq 1 ] || fail "$name: want exactly one line on stderr"
  grep -q 'safetensors' "$W/$name.err" || fail "$name: the error line does not name the file"
}

# the save root is as before: same entries (hidden ones included), same bytes; the old
# checkpoint evaluates as before and is what --resume of the root picks
intact() {
  local what=$1 want=$2 got
  got=$(cd "$R" && ls -A | grep -v '^\.lock$\|^run_id$' | tr '\n' ' ')   # .lock, run_id: the folder's run (src/io/savedir.c)
  [ "$got" = "$want" ] || fail "$what: the save root holds '$got', want '$want'"
  diff -r -x .lock -x run_id "$R" "$W/root.bak" >/dev/null || fail "$what: the save root's files changed"
  "$TED" eval --load "$R/step_00000010" --data "$BOOK" --windows 4 >"$W/now.eval" 2>"$W/now.eval.err" ||
    { cat "$W/now.eval.err"; fail "$what: the step-10 checkpoint no longer loads"; }
  cmp -s "$W/now.eval" "$W/good.eval" || fail "$what: eval of the step-10 checkpoint changed"
}

cp -a "$R" "$W/root.bak"
D=(--data "$BOOK" --data-order shuffled --steps 20)
# optimizer.safetensors (1.7 MB) breaks off at 1 MiB, after model.safetensors (0.9 MB) is whole
limited 1024 fail_opt "${D[@]}" --resume "$R" --save "$R"
intact "failed optimizer write" "step_00000010 "
# model.safetensors breaks off at 256 KiB
limited 256 fail_model "${D[@]}" --resume "$R" --save "$R"
intact "failed model write" "step_00000010 "
# --save-every 10 with a failing step-20 save: the run stops with the error
limited 1024 fail_every "${D[@]}" --resume "$R" --save "$R" --save-every 10
intact "failed periodic save" "step_00000010 "
# the debris of the failed saves does not stand in the way of a good one
train ok20 "${D[@]}" --resume "$R" --save "$R"
same_ckpt "$W/full_shuffled/step_00000020" "$R/step_00000020"
# a failing save of a step that already has a checkpoint leaves that checkpoint alone
rm -rf "$W/root.bak"
cp -a "$R" "$W/root.bak"
limited 1024 fail_replace "${D[@]}" --resume "$R/step_00000010" --save "$R"
intact "failed replacement of step 20" "step_00000010 step_00000020 "
same_ckpt "$W/full_shuffled/step_00000020" "$R/step_00000020"
grep -q "at step 20" <("$TED" train "${MODEL[@]}" "${D[@]}" --resume "$R" 2>&1) ||
  fail "--resume of the root does not pick step 20"

# --save below a regular file: mkdir fails (ENOTDIR, also as root)
echo "plain" >"$W/plainfile"
rc=0
"$TED" train "${MODEL[@]}" --data "$BOOK" --steps 0 --save "$W/plainfile/ck" >"$W/plain.out" 2>"$W/plain.err" || rc=$?
echo "  save below a file: exit $rc: $(cat "$W/plain.err")"
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "--save below a regular file: exit code $rc"
[ "$(wc -l <"$W/plain.err")" -eq 1 ] || fail "--save below a regular file: want exactly one line on stderr"
grep -q plainfile "$W/plain.err" || fail "--save below a regular file: the error does not name the path"
[ "$(cat "$W/plainfile")" = plain ] || fail "--save below a regular file: the file changed"

# (d) --resume DIR without --save keeps saving into DIR and says so (from the run's folder, and from
#     one of its step_N folders: the folder holding it); from a lone checkpoint folder of another name
#     nothing is saved and a line says so. On another global batch (micro-batch 4 -> 2) a warning names
#     both; the tokens seen are kept in trainer_state.json and carried on (4 x 4 x 32 + 2 x 2 x 32).
S=(--data "$BOOK" --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --micro-batch 4 --eval-windows 2 --log-every 0)
K=$W/keep
tr() { local name=$1; shift; "$TED" train "$@" >"$W/$name.out" 2>"$W/$name.err" || { cat "$W/$name.err"; fail "$name"; }; }
tr keep0 "${S[@]}" --steps 4 --save "$K"
tr keep1 "${S[@]}" --steps 6 --micro-batch 2 --resume "$K"
grep -q "^resume: saving into $K, the folder resumed from" "$W/keep1.out" || fail "(d) no 'saving into' line"
[ -d "$K/step_00000006" ] || fail "(d) --resume $K without --save saved no step 6"
grep -q "warning: the checkpoint's run had a global batch of 4 sequences, this run has 2" "$W/keep1.out" ||
  fail "(d) no warning on the global batch change"
grep -q '"tokens": 640, "global_batch": 2' "$K/step_00000006/trainer_state.json" ||
  fail "(d) trainer state: $(cat "$K/step_00000006/trainer_state.json")"
grep -q "640 since step 0" "$W/keep1.out" || fail "(d) the summary's tokens since step 0"
tr keep2 "${S[@]}" --steps 7 --micro-batch 2 --resume "$K/step_00000006/"
[ -d "$K/step_00000007" ] && grep -q '"tokens": 704' "$K/step_00000007/trainer_state.json" ||
  fail "(d) --resume of a step folder did not save step 7 into its run folder"
grep -q "warning: .*global batch" "$W/keep2.out" && fail "(d) a warning without a batch change"
cp -a "$K/step_00000007" "$W/lone"
tr keep3 "${S[@]}" --steps 8 --micro-batch 2 --resume "$W/lone"
grep -q "lone checkpoint.*nothing is saved unless --save" "$W/keep3.out" && [ ! -e "$W/step_00000008" ] &&
  [ ! -e "$W/lone/step_00000008" ] || fail "(d) a lone checkpoint folder"
echo "ok   (d) --resume keeps saving into its folder; global batch warning; tokens carried on"

echo "test_resume: all passed"
