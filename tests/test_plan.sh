#!/usr/bin/env bash
# ted plan against the memory model worked by hand (docs/design.md §5), and its bad input.
set -euo pipefail
: "${TED:?}"
pass=0 fail=0
expect() { if eval "$2"; then echo "ok   $1"; pass=$((pass + 1)); else echo "FAIL $1"; fail=$((fail + 1)); fi; }
out=$("$TED" plan --base-params 1.3e9 --experts 8 --gpus 8)
# tp 2, ep 2: dp 4, edp 2; NP_nonexp/GPU = 2/3·1.3e9/2, NP_exp/GPU = 8/3·1.3e9/4
# (4 + 12/4)·4.3333e8 + (4 + 12/2)·8.6667e8 = 1.17e10 bytes; largest base = 8e10/(1.17e10/1.3e9) = 8.89e9
expect "tp 2 ep 2 state bytes" 'grep -q "tp 2   ep 2    dp 4     edp 2        11700000000 bytes" <<<"$out"'
expect "tp 2 ep 2 largest model and M2 bound" 'grep "tp 2   ep 2 " <<<"$out" | grep -q "largest base model 8.89e+09 params (M2 bound 4e+10)"'
expect "every dividing layout listed (tp 1: ep 1,2,4,8; tp 2: 1,2,4; tp 4: 1,2; tp 8: 1)" '[ $(grep -c "^  tp" <<<"$out") -eq 10 ]'
# fp32: 8 bytes of weights + gradients per parameter: tp 1 ep 8 dp 8 edp 1: (8+1.5)·8.667e8 + (8+12)·4.333e8
out=$("$TED" plan --base-params 1.3e9 --experts 8 --gpus 8 --tp 1 --ep 8 --precision fp32)
expect "fp32 state bytes" 'grep -q " 16900000000 bytes" <<<"$out"'
# pp 2 (tp 2, ep 2 of 8 GPUs: dp 2, edp 1): a stage holds half: (4 + 12/2)·2.1667e8 + (4 + 12/1)·4.3333e8 = 9.1e9
out=$("$TED" plan --base-params 1.3e9 --experts 8 --gpus 8 --tp 2 --ep 2 --pp 2 --micro-batches 8 --hidden 2048 \
      --layers 24 --seq-len 2048 --micro-batch 1 --heads 16)
expect "pp 2 state bytes" 'grep -q "pp 2    tp 2   ep 2    dp 2     edp 1 *9100000000 bytes" <<<"$out"'
# bubbles: (2-1)/(8+2-1) = 0.111; interleaved v 2: 1/(16+1) = 0.059
expect "pp 2 bubbles" 'grep -q "gpipe 0.111, 1f1b 0.111, interleaved (v 2) 0.059" <<<"$out"'
# a block's activations: 2048·1·2048·(34 + 5·16·2048/2048) = 478150656 bytes; gpipe 8·12 blocks: 45.90 GB,
# 1f1b 2·12: 11.48 GB, interleaved min(2·1+1·2+1, 16) = 5 chunk micro-batches of 6 blocks: 14.34 GB
expect "pp 2 activations" 'grep -q "gpipe       96.0 .*45.90 GB" <<<"$out" && grep -q "1f1b        24.0 .*11.48 GB" <<<"$out" && grep -q "interleaved 30.0 .*14.34 GB" <<<"$out"'
for bad in "--experts 8 --gpus 8" "--base-params x --experts 8 --gpus 8" "--base-params 1e9 --experts 8 --gpus 8 --tp 3" \
           "--base-params 1e9 --experts 8 --gpus 8 --precision fp8" "--base-params 1e9 --experts 8 --gpus 8 --frob 1" "--base-params 1e9 --experts 8 --gpus 8 --pp 3"; do
  set +e; err=$("$TED" plan $bad 2>&1 >/dev/null); rc=$?; set -e
  expect "bad input ($bad): exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l <<<"$err") -eq 1 ] && grep -q "^ted: plan" <<<"$err"'
done
# sizes with suffixes: 1.3B and 80GB are 1.3e9 and 80e9
expect "6.7B / 80GB suffixes" '[ "$("$TED" plan --base-params 1.3B --experts 8 --gpus 8 --gpu-mem 80GB)" = "$("$TED" plan --base-params 1.3e9 --experts 8 --gpus 8)" ]'
# --config: the exact counts of a train config; one process (dp 1) equals what ted train predicts for itself
cd "${TED_ROOT:-.}"
pred=$("$TED" train --config configs/moby.json --data data/moby-dick.txt --steps 0 --threads 1 2>&1 | sed -n 's|^model state per rank: M1 (docs/design.md §5) predicts \([0-9]*\) bytes.*|\1|p')
out=$("$TED" plan --config configs/moby.json --gpus 1)
expect "plan --config = ted train's own prediction ($pred bytes)" '[ -n "$pred" ] && grep -q "^  tp 1   ep 1    dp 1     edp 1  *$pred bytes  fits" <<<"$out"'
# --config with --pp 2 on 2 GPUs: each stage holds half the model, dp 1 as above: half the bytes; the
# pipeline rows follow, from the config's own shape; a --pp that does not divide --gpus is refused
out=$("$TED" plan --config configs/moby.json --gpus 2 --pp 2)
half=$(sed -n 's|^  pp 2    tp 1   ep 1    dp 1     edp 1  *\([0-9]*\) bytes.*|\1|p' <<<"$out")
expect "plan --config --pp 2: a stage holds half ($half of $pred bytes)" \
  '[ -n "$half" ] && [ $(( 2 * half - pred )) -ge -2 ] && [ $(( 2 * half - pred )) -le 2 ] && grep -q "^pipeline pp 2" <<<"$out"'
set +e; err=$("$TED" plan --config configs/moby.json --gpus 4 --pp 3 2>&1 >/dev/null); rc=$?; set -e
expect "plan --config --pp 3 of 4 GPUs refused: $err" '[ $rc -eq 2 ] && [ "$err" = "ted: plan: --pp 3 does not divide --gpus 4" ]'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
