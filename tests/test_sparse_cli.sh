#!/usr/bin/env bash
# test_sparse_cli.sh — the `sparse_attention` section from the command line (design):
#  - bad sections are refused with exit 2 and one stderr line naming the key or the rule, and no
#    log or checkpoint written: unknown key, unknown mode, wrong type, seq_len not a multiple of
#    block, bidirectional attention, horizontal global attention, num_local_blocks not a multiple of
#    num_global_blocks, too many random blocks, global_block_indices or global_block_end_indices past
#    the last block;
#  - a trained `variable` checkpoint keeps its section in config.json, and `ted generate` and
#    `ted eval` (at a length that is not a multiple of block) run from it; eval at the training
#    length gives a different loss once the section is taken out of config.json (the layout is used).
source "${TED_ROOT:?}/tests/lib.sh"
model=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 64 --seq-len 64 --micro-batch 2
       --steps 3 --eval-windows 4 --log-every 100)
refuse() {   # refuse NAME SECTION WANT [ARGS...]: exit 2, one line containing WANT, nothing written
  local n=$1 sec=$2 want=$3; shift 3
  echo "{\"sparse_attention\": $sec}" >"$W/$n.json"
  set +e
  "$TED" train --config "$W/$n.json" "${model[@]}" --log "$W/$n.jsonl" --save "$W/$n.ckpt" "$@" >"$W/$n.out" 2>"$W/$n.err"
  local rc=$?
  set -e
  if [ $rc -eq 2 ] && [ "$(wc -l <"$W/$n.err")" -eq 1 ] && grep -qi -- "$want" "$W/$n.err" && [ ! -e "$W/$n.jsonl" ] \
     && [ ! -e "$W/$n.ckpt" ]; then ok "$n: $(cat "$W/$n.err")"
  else bad "$n: rc $rc"; cat "$W/$n.err"; fi
}
refuse unknown-key '{"mode": "fixed", "num_locals": 2}' 'sparse_attention.num_locals'
refuse unknown-mode '{"mode": "strided"}' 'sparse_attention.mode'
refuse wrong-type '{"mode": "fixed", "block": "16"}' 'sparse_attention.block'
refuse block '{"mode": "fixed", "block": 48}' 'multiple of block'
refuse bidirectional '{"mode": "bigbird", "attention": "bidirectional"}' 'bidirectional'
refuse horizontal '{"mode": "fixed", "horizontal_global_attention": true}' 'horizontal_global_attention'
refuse local-global '{"mode": "fixed", "num_local_blocks": 3, "num_global_blocks": 2}' 'num_global_blocks'
refuse random '{"mode": "bigbird", "num_random_blocks": 5}' 'num_random_blocks'
refuse global-index '{"mode": "variable", "global_block_indices": [0, 9]}' 'global_block_indices\[1\] (9) is past the last block'
refuse global-end '{"mode": "bslongformer", "global_block_indices": [0], "global_block_end_indices": [99]}' \
  'global_block_end_indices\[0\] (99) is past the end'
refuse recompute-cuda '{"mode": "fixed", "recompute": true}' 'recompute runs on the CPU only' --device cuda
refuse recompute-type '{"mode": "fixed", "recompute": 1}' 'sparse_attention.recompute'

cat >"$W/variable.json" <<'JSON'
{"sparse_attention": {"mode": "variable", "block": 16, "num_random_blocks": 1, "local_window_blocks": [1, 2],
  "global_block_indices": [0], "different_layout_per_head": true}}
JSON
"$TED" train --config "$W/variable.json" "${model[@]}" --save "$W/ck" >"$W/train.out" 2>&1
ck=$W/ck/step_00000003
if grep -Eq '"mode":[[:space:]]*"variable"' "$ck/config.json"; then ok "config.json keeps the section"; else bad "config.json lacks the section"; fi
if "$TED" generate --load "$ck" --prompt "Call me" --tokens 80 >"$W/gen.out" 2>"$W/gen.err" && [ "$(wc -c <"$W/gen.out")" -ge 80 ]; then
  ok "generate from a sparse checkpoint (80 tokens past the 64 of a window)"; else bad "generate"; cat "$W/gen.err"; fi
e40=$("$TED" eval --load "$ck" --data data/moby-dick.txt --windows 4 --seq-len 40)
e64=$("$TED" eval --load "$ck" --data data/moby-dick.txt --windows 4)
/usr/bin/python3 - "$ck/config.json" "$W/dense.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c["sparse_attention"]; json.dump(c, open(sys.argv[2], "w"))
PY
mkdir -p "$W/dense_ck" && cp "$ck"/* "$W/dense_ck/" && cp "$W/dense.json" "$W/dense_ck/config.json"
d64=$("$TED" eval --load "$W/dense_ck" --data data/moby-dick.txt --windows 4)
if [ -n "$e40" ] && [ "$e64" != "$d64" ]; then ok "eval at T 40 runs; at T 64 sparse $e64 vs dense $d64"
else bad "eval: $e40 / $e64 / $d64"; fi
# `ted plan --config` counts the attention probabilities by present blocks: `fixed` (T 1024, block 64,
# 4 local, 1 global) against the count from the layout's definition (query block i sees its window's
# blocks up to i and the last block of every earlier window), and dense as B·H·T² floats per layer.
cat >"$W/plan_fixed.json" <<'JSON'
{"model": {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024}, "train_micro_batch_size_per_gpu": 2,
 "sparse_attention": {"mode": "fixed", "block": 64, "num_local_blocks": 4, "num_global_blocks": 1}}
JSON
planned=$("$TED" plan --config "$W/plan_fixed.json" --gpus 2 --tp 2 | grep '^attention')
want=$(/usr/bin/python3 -c '
nb, blk, B, H, L = 16, 64, 2, 2, 3
n = sum((i % 4 + 1) + i // 4 for i in range(nb))
print(4 * B * H * L * n * blk * blk, 4 * B * H * L * 1024 * 1024)')
read -r want_sparse want_dense <<<"$want"
if [[ "$planned" == *"fixed, $want_sparse bytes"*"dense's $want_dense "* ]]; then ok "plan: $planned"
else bad "plan: '$planned', want fixed $want_sparse and dense $want_dense bytes"; fi
# with recompute: nothing kept; the backward's chunk is one layer's strips here (below 64 MB)
/usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1])); c["sparse_attention"]["recompute"] = True; json.dump(c, open(sys.argv[2], "w"))' \
  "$W/plan_fixed.json" "$W/plan_rc.json"
planned=$("$TED" plan --config "$W/plan_rc.json" --gpus 2 --tp 2 | grep '^attention')
if [[ "$planned" == *"no probabilities kept"*"chunks of $((want_sparse / 3)) bytes"* ]]; then ok "plan: $planned"
else bad "plan with recompute: '$planned', want chunks of $((want_sparse / 3)) bytes"; fi
summary
