#!/usr/bin/env bash
# test_startup.sh — what a run says when it starts, and `make train`'s script (one process):
#  - the model line says dense or MoE (blocks, experts, top-k, router) and names the attention:
#    dense, or the sparse mode with its block and the share of the causal blocks kept
#  - the settings dump holds every section (the scheduler, the fp16 loss scaler, sparse_attention)
#    and numbers as written (min-lr 6e-05 for lr 0.0006, not 6.0000002e-05)
#  - one process prints one line on the activations held, no "pipeline:" lines
#  - token shards without a *_val_* shard: one line says there is no evaluation and how to get one
#  - scripts/train_moby.sh (make train): a second start continues the run from its checkpoint and
#    appends to its log; Ctrl-C (SIGINT) saves and prints how to continue; the three samples
#    have distinct seeds
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
S=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 64 --steps 1 --eval-windows 2)
"$TED" train "${S[@]}" >"$W/dense.out" 2>&1
grep -q '^model: [0-9]* parameters, dense, 2 blocks; dense attention; T 64' "$W/dense.out" &&
  ! grep -q 'MoE blocks of 1 experts' "$W/dense.out" && ok "dense: $(grep '^model' "$W/dense.out" | cut -c1-90)" ||
  bad "dense model line: $(grep '^model' "$W/dense.out")"
grep -q '^layout: G 1  tp 1  dp 1  ep 1  edp 1  pp 1$' "$W/dense.out" && ok "dense layout line names no experts" ||
  bad "dense layout line: $(grep '^layout' "$W/dense.out")"
# --save makes its missing parents, as mkdir -p
"$TED" train "${S[@]}" --save "$W/new/parents/ck" >"$W/save.out" 2>&1 && [ -d "$W/new/parents/ck/step_00000001" ] &&
  ok "--save creates missing parent folders" || bad "--save into missing parents: $(grep '^ted:' "$W/save.out")"
grep -q '^activations: 1 view(s) held' "$W/dense.out" && ! grep -q '^pipeline' "$W/dense.out" &&
  ok "one process: $(grep '^activations' "$W/dense.out")" || bad "pipeline lines on one process"
grep -q 'min-lr 6e-05 ' "$W/dense.out" && ok "min-lr as written: 6e-05" || bad "min-lr: $(grep -o 'min-lr [^ ]*' "$W/dense.out")"
for k in 'scheduler.type WarmupCosine' 'fp16.loss_scale 0' 'fp16.hysteresis 2' 'sparse_attention {"mode": "dense"}'; do
  grep -qF "$k" "$W/dense.out" || bad "the dump lacks $k"
done
echo '{"sparse_attention": {"mode": "fixed", "block": 16, "num_local_blocks": 2, "num_global_blocks": 1}}' >"$W/sp.json"
"$TED" train "${S[@]}" --num-experts 4 --router switch --top-k 1 --config "$W/sp.json" >"$W/moe.out" 2>&1
grep -q '^model: [0-9]* parameters, MoE, 2 blocks of which 1 MoE with 4 experts, top-1, router switch; sparse attention fixed (block 16, [0-9.]*% of the causal blocks)' "$W/moe.out" &&
  ok "MoE + sparse: $(grep '^model' "$W/moe.out" | cut -c1-160)" || bad "MoE model line: $(grep '^model' "$W/moe.out")"
grep -qF '"mode": "fixed"' "$W/moe.out" && ok "the dump shows the sparse_attention section" || bad "no sparse section in the dump"
# no validation shard
mkdir -p "$W/tok" && head -c 100000 data/moby-dick.txt >"$W/tok/a.txt"
"$TED" tokenize --input "$W/tok/a.txt" --output "$W/tok/s" >/dev/null 2>&1 && rm -f "$W"/tok/s_val_*
"$TED" train --data "$W/tok/s_train_*.bin" --vocab-size 50257 --n-layer 1 --n-embd 32 --n-head 4 --n-positions 32 \
  --steps 1 >"$W/noval.out" 2>&1
[ "$(grep -c 'has no validation split' "$W/noval.out")" -eq 1 ] && grep -q 'ted tokenize writes PREFIX_val_' "$W/noval.out" &&
  ok "no validation split: $(grep 'no validation' "$W/noval.out" | cut -c1-120)" || bad "no line on the missing validation split"
# make train's script: continue, Ctrl-C, seeds
R=(--n-layer 1 --n-embd 32 --n-head 4 --eval-windows 2 --log-every 1 --sample-every 0)
OUT=$W/moby TED=$TED bash scripts/train_moby.sh "${R[@]}" --steps 2 >"$W/m1.out" 2>&1 || bad "make train's script: first run"
OUT=$W/moby TED=$TED bash scripts/train_moby.sh "${R[@]}" --steps 4 >"$W/m2.out" 2>&1 || bad "make train's script: second run"
grep -aq 'continuing the run' "$W/m2.out" && grep -aq 'resumed from .*step_00000002 at step 2' "$W/m2.out" &&
  [ "$(grep -c '"step": *[0-9]*, *"loss"\|"step":[0-9]*,"loss"' "$W/moby/log.jsonl")" -ge 4 ] &&
  ok "a second start continues from step 2 and appends to the log" || bad "make train's script does not continue"
[ "$(grep -ao 'seed [0-9]*) ---' "$W/m2.out" | sort -u | wc -l)" -eq 3 ] && ok "three samples, three seeds" ||
  bad "samples' seeds: $(grep -o 'seed [0-9]*' "$W/m2.out" | tr '\n' ' ')"
OUT=$W/moby TED=$TED timeout -s INT 5 bash scripts/train_moby.sh "${R[@]}" --steps 100000 >"$W/m3.out" 2>&1
grep -aq "make train: interrupted; \`make train\` continues" "$W/m3.out" && grep -aq 'stopped by SIGINT after step [0-9]*; saved ' "$W/m3.out" &&
  ok "Ctrl-C: $(grep 'make train: interrupted' "$W/m3.out" | cut -c1-100)" || bad "Ctrl-C: $(tail -2 "$W/m3.out")"
[ "$fails" -eq 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
