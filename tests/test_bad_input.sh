#!/usr/bin/env bash
# test_bad_input.sh — every bad input is refused cleanly (design §7; one error line per failure):
# exit code exactly 2 (never a crash: no code >= 128), exactly one line on stderr that names the
# file or option at fault (a case-insensitive substring given per case), and no file written or
# changed: a --log file and a --save checkpoint directory that existed before keep their bytes,
# the inputs keep theirs, and no new file appears (checksums and listings before/after).
# Cases: data (missing file, empty and too-short text, shard with a bad magic, a truncated
# shard, a shard shorter than its header, GPT-2 token ids >= vocab_size 256), JSON configs
# (malformed, unknown key, wrong type, invalid combination), flags (unknown, missing value,
# non-numeric, invalid combinations: top_k > num_experts, n_head not dividing n_embd,
# seq_len > n_positions, micro_batch not a multiple of group_size), checkpoints (another model
# shape, corrupt safetensors header, missing config.json, not a checkpoint), `ted eval` (too many
# windows, missing data, ids >= vocab_size), `ted generate` (no --load, a missing --load) and
# `ted tokenize` (missing input); sizes beyond this node's memory (a 4 TB text file, shard and
# safetensors file, sparse), named before anything is allocated; `ted tune` cluster files with a key
# twice or more devices than its bound. Two controls check that the base command line is good and
# that a text file of exactly one training window is accepted. All cases run; the failed ones
# are listed at the end.
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
PY=/usr/bin/python3
IN=$W/in        # inputs (must not change)
KEEP=$W/keep    # a log and a checkpoint directory that existed before (must not change)
OUT=$W/out      # where outputs would go (must stay empty)
IO=$W/io        # stdout/stderr of the cases
mkdir -p "$IN" "$KEEP" "$OUT" "$IO"
BOOK=$TED_ROOT/data/moby-dick.txt
[ -s "$BOOK" ] || { echo "FAIL: $BOOK is missing (bash scripts/setup.sh)"; exit 1; }
[ -s data/gpt2/encoder.json ] || { echo "FAIL: data/gpt2/encoder.json is missing (bash scripts/setup.sh)"; exit 1; }

# the tiny MoE model (T 32); every train case also names the log and the checkpoint to keep
MODEL=(--n-layer 2 --n-embd 64 --n-head 4 --n-positions 64 --seq-len 32 --micro-batch 4 --num-experts 4
       --top-k 2 --moe-every 2 --steps 2 --eval-windows 4)
KEEPS=(--log "$KEEP/log.jsonl" --save "$KEEP/ckpt")

# ---------------------------------------------------------------------------------------
# fixtures
setup_ok() { # NAME ARGS...: a command that must succeed
  local name=$1; shift
  "$@" >"$IO/$name.out" 2>"$IO/$name.err" || { cat "$IO/$name.err"; echo "FAIL: setup: $name"; exit 1; }
}
: >"$IN/empty.txt"
head -c 36 "$BOOK" >"$IN/short.txt"     # training split floor(0.9*36) = 32 < T+1 = 33 bytes
head -c 37 "$BOOK" >"$IN/window.txt"    # training split 33 bytes: exactly one window
head -c 20000 "$BOOK" >"$IN/small.txt"
"$PY" - "$IN" <<'EOF'
import struct, sys
d = sys.argv[1]
def shard(name, magic, version, count, ntok):
    hdr = struct.pack('<256i', *([magic, version, count] + [0] * 253))
    open(f'{d}/{name}', 'wb').write(hdr + struct.pack(f'<{ntok}H', *[(i * 7) % 256 for i in range(ntok)]))
shard('badmagic_train.bin', 20240521, 1, 1000, 1000)   # a wrong magic, otherwise fine
shard('trunc_train.bin', 20240520, 1, 1000, 600)       # the header promises 1000 tokens, 600 are there
shard('good_train.bin', 20240520, 1, 1000, 1000)       # a good shard (ids < 256) for the control
open(f'{d}/hdr_train.bin', 'wb').write(struct.pack('<3i', 20240520, 1, 0))  # shorter than the header
open(f'{d}/bad.json', 'w').write('{"model": {"n_embd": 64,}\n')
open(f'{d}/unknown_key.json', 'w').write('{"model": {"n_embd": 64, "n_embed": 64}}\n')
open(f'{d}/wrong_type.json', 'w').write('{"model": {"n_embd": "64"}}\n')
open(f'{d}/combo.json', 'w').write('{"moe": {"group_size": 3}}\n')   # micro-batch 4 % 3
EOF
setup_ok tokenize "$TED" tokenize --input "$IN/small.txt" --output "$IN/gpt2"   # ids up to 50256
[ -f "$IN/gpt2_train_000000.bin" ] || { echo "FAIL: setup: no GPT-2 shard"; exit 1; }
setup_ok ck64 "$TED" train "${MODEL[@]}" --data "$BOOK" --steps 0 --save "$IN/ck64"
cp -a "$IN/ck64/step_00000000" "$IN/ck_corrupt"
printf 'this is not a JSON header at all!' | dd of="$IN/ck_corrupt/model.safetensors" bs=1 seek=8 count=32 conv=notrunc 2>/dev/null
cp -a "$IN/ck64/step_00000000" "$IN/ck_nocfg"
rm "$IN/ck_nocfg/config.json"
mkdir "$IN/not_a_ckpt"
# files larger than this node's memory (sparse: 4 TB that take no disk), outside in/ (never checksummed)
BIG=$W/big
mkdir -p "$BIG/ck" && cp "$IN/ck64/step_00000000/config.json" "$BIG/ck/"
truncate -s 4T "$BIG/text.txt" "$BIG/tokens_train.bin" "$BIG/ck/model.safetensors" ||
  { echo "FAIL: setup: cannot make sparse files of 4 TB here"; exit 1; }
# cluster files (ted tune): a key twice, and more devices than tune's --gpus bound
sed 's/"nodes": 8,/"nodes": 8, "nodes": 2,/' configs/clusters/dgx-a100.json >"$IN/dup_cluster.json"
sed 's/"nodes": 8,/"nodes": 1000000,/; s/"devices_per_node": 8/"devices_per_node": 1024/' configs/clusters/dgx-a100.json \
  >"$IN/huge_cluster.json"
# the files that must survive: a log with content, a whole checkpoint directory
setup_ok keep "$TED" train "${MODEL[@]}" --data "$BOOK" "${KEEPS[@]}"
[ -s "$KEEP/log.jsonl" ] && [ -d "$KEEP/ckpt/step_00000002" ] || { echo "FAIL: setup: no log or checkpoint"; exit 1; }

# the state that no case may change: every path under in/, keep/, out/ and the scratch root,
# with the checksum of each file
snapshot() {
  (cd "$W" && find . -path ./io -prune -o -print | LC_ALL=C sort &&
     find in keep out -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
}
snapshot >"$IO/before.txt"

# ---------------------------------------------------------------------------------------
# bad NAME NEEDLE ARGS...: `ted ARGS` must exit 2 with one stderr line naming NEEDLE, and
# change nothing
failed=()
ncases=0
bad() {
  local name=$1 needle=$2; shift 2
  local rc=0 why=() lines
  ncases=$((ncases + 1))
  "$TED" "$@" </dev/null >"$IO/case.out" 2>"$IO/case.err" || rc=$?
  lines=$(awk 'END { print NR }' "$IO/case.err")
  if [ "$rc" -ge 128 ]; then why+=("crashed (exit $rc)")
  elif [ "$rc" -ne 2 ]; then why+=("exit code $rc, want 2"); fi
  [ "$lines" -eq 1 ] || why+=("$lines lines on stderr, want 1")
  grep -qiF -- "$needle" "$IO/case.err" || why+=("the message does not name \"$needle\"")
  snapshot >"$IO/after.txt"
  if ! cmp -s "$IO/before.txt" "$IO/after.txt"; then
    why+=("files changed: $(diff "$IO/before.txt" "$IO/after.txt" | grep '^[<>]' | head -3 | tr '\n' ' ' || true)")
  fi
  if [ ${#why[@]} -eq 0 ]; then
    printf 'ok    %-34s %s\n' "$name" "$(cat "$IO/case.err")"
  else
    printf 'FAIL  %-34s %s\n' "$name" "$(IFS=';'; echo "${why[*]}")"
    sed 's/^/        stderr: /' "$IO/case.err" | head -8
    failed+=("$name")
    # put the state back so that one failure does not fail every later case
    rm -rf "$OUT" "$KEEP"; mkdir -p "$OUT" "$KEEP"
    setup_ok keep "$TED" train "${MODEL[@]}" --data "$BOOK" "${KEEPS[@]}"
    snapshot >"$IO/before.txt"
  fi
}
train_bad() { # NAME NEEDLE ARGS...: a `ted train` case with the tiny model, --log and --save
  local name=$1 needle=$2; shift 2
  bad "$name" "$needle" train "${MODEL[@]}" "${KEEPS[@]}" "$@"
}

# controls: the base command line is good, a file of exactly one training window is accepted
mkdir -p "$W/ctl"
for ctl in "book:$BOOK" "one-window:$IN/window.txt" "good-shard:$IN/good_train.bin"; do
  name=${ctl%%:*} data=${ctl#*:}
  rc=0
  "$TED" train "${MODEL[@]}" --data "$data" --log "$W/ctl/$name.jsonl" >"$IO/ctl.out" 2>"$IO/ctl.err" ||
    rc=$?
  if [ "$rc" -ne 0 ]; then
    sed 's/^/        stderr: /' "$IO/ctl.err"
    echo "FAIL  control $name: exit code $rc, want 0"; failed+=("control $name")
  else echo "ok    control $name"; fi
done
rm -rf "$W/ctl"

# --- data
train_bad "missing data file"          no-such-file.txt --data "$IN/no-such-file.txt"
train_bad "missing shard"              no-such_train.bin --data "$IN/no-such_train.bin"
train_bad "no --data"                  --data
train_bad "empty text file"            empty.txt        --data "$IN/empty.txt"
train_bad "text shorter than T+1"      short.txt        --data "$IN/short.txt"
train_bad "shard with a wrong magic"   badmagic_train.bin --data "$IN/badmagic_train.bin"
train_bad "truncated shard"            trunc_train.bin  --data "$IN/trunc_train.bin"
train_bad "shard shorter than header"  hdr_train.bin    --data "$IN/hdr_train.bin"
train_bad "token ids >= vocab_size"    gpt2_train_000000.bin --data "$IN/gpt2_train_000000.bin"
train_bad "data is a directory"        "$IN"            --data "$IN"
train_bad "text larger than memory"    text.txt         --data "$BIG/text.txt"
train_bad "shards larger than memory"  tokens_train.bin --data "$BIG/tokens_train.bin"
# --- JSON configs
D=(--data "$BOOK")
train_bad "malformed JSON config"      bad.json         "${D[@]}" --config "$IN/bad.json"
train_bad "unknown JSON key"           n_embed          "${D[@]}" --config "$IN/unknown_key.json"
train_bad "wrong JSON type"            n_embd           "${D[@]}" --config "$IN/wrong_type.json"
train_bad "JSON group_size vs micro_batch" group_size            "${D[@]}" --config "$IN/combo.json"
train_bad "missing config file"        no-such.json     "${D[@]}" --config "$IN/no-such.json"
# --- flags
train_bad "unknown flag"               --frobnicate     "${D[@]}" --frobnicate 3
train_bad "flag missing its value"     --lr             "${D[@]}" --lr
train_bad "flag followed by a flag"    --lr             "${D[@]}" --lr --steps 2
train_bad "non-numeric float flag"     --lr             "${D[@]}" --lr fast
train_bad "non-numeric int flag"       --steps          "${D[@]}" --steps 12x
train_bad "bad --data-order"           --data-order     "${D[@]}" --data-order random
train_bad "top_k > num_experts"        top_k            "${D[@]}" --top-k 5
train_bad "n_head does not divide"     n_head           "${D[@]}" --n-head 5
train_bad "seq_len > n_positions"      seq_len          "${D[@]}" --seq-len 128
train_bad "micro_batch % group_size"   group_size       "${D[@]}" --group-size 3
train_bad "bad --device"               --device         "${D[@]}" --device gpu
# (a machine with a GPU runs this one, so only without one)
[ -e /dev/nvidia0 ] || train_bad "--device cuda without a GPU" --device "${D[@]}" --device cuda
# --- checkpoints
train_bad "resume: another n_embd"     n_embd           "${D[@]}" --resume "$IN/ck64" --n-embd 32
train_bad "resume: corrupt header"     model.safetensors "${D[@]}" --resume "$IN/ck_corrupt"
train_bad "resume: no config.json"     config.json      "${D[@]}" --resume "$IN/ck_nocfg"
train_bad "resume: not a checkpoint"   not_a_ckpt       "${D[@]}" --resume "$IN/not_a_ckpt"
train_bad "resume: missing directory"  no-such-ckpt     "${D[@]}" --resume "$IN/no-such-ckpt"
# --- ted eval
bad "eval: too many windows"   --windows      eval --load "$IN/ck64" --data "$BOOK" --windows 100000
bad "eval: corrupt header"     model.safetensors eval --load "$IN/ck_corrupt" --data "$BOOK" --windows 2
bad "eval: no config.json"     config.json    eval --load "$IN/ck_nocfg" --data "$BOOK" --windows 2
bad "eval: missing data file"  no-such-file.txt eval --load "$IN/ck64" --data "$IN/no-such-file.txt" --windows 2
bad "eval: ids >= vocab_size"  gpt2_train_000000.bin eval --load "$IN/ck64" --data "$IN/gpt2_train_000000.bin" --windows 2
bad "eval: --windows 0"        --windows      eval --load "$IN/ck64" --data "$BOOK" --windows 0
bad "eval: safetensors larger than memory" model.safetensors eval --load "$BIG/ck" --data "$BOOK" --windows 2
# --- ted tune: cluster files
bad "tune: a cluster key twice"  'key "nodes" appears twice' tune --config configs/moby.json --cluster "$IN/dup_cluster.json"
bad "tune: 1e9 devices"          'huge_cluster.json: "nodes" x "devices_per_node"' tune --config configs/moby.json \
  --cluster "$IN/huge_cluster.json"
# --- ted generate
bad "generate: no --load"      --load         generate --tokens 4
bad "generate: missing --load" no-such-ckpt   generate --load "$IN/no-such-ckpt" --tokens 4
bad "generate: corrupt header" model.safetensors generate --load "$IN/ck_corrupt" --tokens 4
# --- ted tokenize
bad "tokenize: missing input"  no-such-file.txt tokenize --input "$IN/no-such-file.txt" --output "$OUT/tok"

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "test_bad_input: ${#failed[@]} failed:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "test_bad_input: all $ncases cases passed"
