#!/usr/bin/env bash
# test_tune_line.sh — `ted tune`'s advice runs as printed: on three presets (two GPU clusters and the
# namespace cluster) and for a llama config with n_kv_head 2, the best line names this binary by its
# path, the data given to tune and, on a GPU cluster, --device cuda (and --bf16 for an fp32 config),
# and the line itself, with --dry-run --ranks N added (N: its mpirun -np), passes ted train's checks
# (exit 0, nothing trained). Tune never ranks what ted train refuses: no tp 4 for n_kv_head 2, no
# overlap on a GPU cluster, and a llama model on a GPU cluster is refused with one line that says why.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
exe=$(readlink -f "$TED")
cat >"$W/llama.json" <<'JSON'
{"model": {"arch": "llama", "vocab_size": 256, "n_positions": 64, "n_embd": 64, "n_layer": 4, "n_head": 8,
           "n_kv_head": 2, "n_inner": 128},
 "moe": {"num_experts": 4, "top_k": 2, "moe_every": 2, "expert_type": "swiglu", "router": "mixtral"},
 "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "seq_len": 32}
JSON

# name, config, cluster, gpu (1/0), tune's extra flags...
check_line() {
  local name=$1 cfg=$2 cluster=$3 gpu=$4; shift 4
  local out line rc=0
  out=$("$TED" tune --config "$cfg" --cluster "$cluster" --data data/moby-dick.txt "$@" 2>&1) || rc=$?
  line=$(sed -n 's/^best: //p' <<<"$out")
  [ $rc -eq 0 ] && [ -n "$line" ] || { bad "$name: tune exit $rc, no best line"; echo "$out" | tail -3; return; }
  read -ra w <<<"$line"
  local np=1 i=0
  [ "${w[0]}" = mpirun ] && np=${w[2]}
  while [ "${w[$i]}" != train ]; do i=$((i + 1)); done
  local bin=${w[$((i - 1))]} args=("${w[@]:$((i + 1))}")
  expect "$name: the line runs this binary ($bin)" '[ "$bin" = "$exe" ]'
  expect "$name: the line has the data given to tune" 'grep -q -- "--data data/moby-dick.txt" <<<"$line"'
  if [ "$gpu" = 1 ]; then
    expect "$name: a GPU cluster's line has --device cuda" 'grep -q -- "--device cuda" <<<"$line"'
    expect "$name: no overlap on a GPU cluster" '! grep -q -- "--overlap-degree [2-9]\|--overlap-comm" <<<"$line"'
  else expect "$name: a CPU cluster's line has no --device" '! grep -q -- "--device" <<<"$line"'; fi
  local dry drc=0
  dry=$("$bin" train "${args[@]}" --dry-run --ranks "$np" 2>&1) || drc=$?
  if [ $drc -eq 0 ] && grep -q "^dry run: ted train accepts this run" <<<"$dry"; then
    ok "$name: the best line (np $np) passes ted train --dry-run: $(grep '^dry run: [0-9]' <<<"$dry")"
  else bad "$name: ted train --dry-run of the best line: exit $drc"; echo "$line"; echo "$dry" | tail -3; fi
}
check_line "dgx-h100, 64 GPUs" configs/moby.json dgx-h100 1 --gpus 64
check_line "dgx-a100, 16 GPUs" configs/moby.json dgx-a100 1 --gpus 16
check_line "namespace" configs/moby.json namespace 0
check_line "llama, n_kv_head 2, namespace" "$W/llama.json" namespace 0
check_line "llama, n_kv_head 2, tp 2 fixed" "$W/llama.json" namespace 0 --tp 2
out=$("$TED" tune --config configs/moby.json --cluster dgx-h100 --gpus 64 2>&1)
expect "fp32 config on a GPU cluster: the line adds --bf16 and says so" \
  'grep -q "^best: .* --bf16" <<<"$out" && grep -q "the line adds --bf16" <<<"$out"'
expect "dgx-h100: the layouts the GPU path refuses are left out, with the reason" \
  'grep -q "^left out: [0-9]* layouts that ted train --device cuda refuses" <<<"$out" && grep -q "overlap_degree 2 runs on the CPU only" <<<"$out"'

# n_kv_head 2: no layout of tp 4 is ranked (ted train refuses it), and fixing tp 4 says why
n=$("$TED" tune --config "$W/llama.json" --cluster namespace --json | grep -c '"tp": 4,')
expect "llama n_kv_head 2: no tp 4 layout ranked ($n)" '[ "$n" -eq 0 ]'
err=$("$TED" tune --config "$W/llama.json" --cluster namespace --tp 4 2>&1 >/dev/null); rc=$?
expect "llama --tp 4: exit 2, one line with ted train's reason: $err" \
  '[ $rc -eq 2 ] && [ $(wc -l <<<"$err") -eq 1 ] && grep -q "n_kv_head (2) is not a multiple of tp (4)" <<<"$err"'
err=$("$TED" tune --config "$W/llama.json" --cluster dgx-h100 --gpus 8 2>&1 >/dev/null); rc=$?
expect "llama on a GPU cluster: exit 2, one line: $err" \
  '[ $rc -eq 2 ] && [ $(wc -l <<<"$err") -eq 1 ] && grep -q "model.arch llama runs on the CPU only" <<<"$err"'
# the same llama model runs on the CPUs of a GPU cluster when asked (--device cpu)
check_line "llama, dgx-h100 --device cpu" "$W/llama.json" dgx-h100 0 --gpus 8 --device cpu
# a dry run refuses what ted train refuses, with the same line, and writes nothing
err=$("$TED" train --config "$W/llama.json" --data data/moby-dick.txt --tp 4 --dry-run --ranks 4 --save "$W/no" 2>&1); rc=$?
expect "--dry-run of a refused layout: exit 2, ted train's line: $err" \
  '[ $rc -eq 2 ] && grep -q "n_kv_head (2) is not a multiple of tp (4)" <<<"$err" && [ ! -e "$W/no" ]'
"$TED" train --config "$W/llama.json" --data data/moby-dick.txt --tp 2 --dry-run --ranks 4 --save "$W/no" --log "$W/no.jsonl" >/dev/null 2>&1; rc=$?
expect "--dry-run of a valid layout: exit 0, no --save folder, no log" '[ $rc -eq 0 ] && [ ! -e "$W/no" ] && [ ! -e "$W/no.jsonl" ]'
err=$("$TED" train --data data/moby-dick.txt --ranks 4 2>&1); rc=$?
expect "--ranks without --dry-run: exit 2: $err" '[ $rc -eq 2 ] && grep -q -- "--ranks 4 is for --dry-run" <<<"$err"'
summary
