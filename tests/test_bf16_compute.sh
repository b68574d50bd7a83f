#!/usr/bin/env bash
# bf16 compute on the CPU (docs/gemm.md, nn/gemm.h), whole runs:
#  - the start-up line names the engine: bf16 compute under --bf16, fp32 without it;
#  - bf16 compute is deterministic: the same run twice gives the same bits;
#  - bf16 compute tracks fp32 (no --bf16) on the test models (GPT MoE with capacity and dropless, a
#    dense GPT, a llama MoE): every step's loss, lm_loss and val_loss within 1 % over 40 steps. Why 1 %: rounding each
#    GEMM input to bf16 moves it by up to 2⁻⁹ (0.2 %), which moves the first losses by about 0.1 %;
#    the runs then part slowly (measured 0.2–0.35 % by step 30, the same as 16-bit storage alone),
#    while a product left out, a transposed operand or a gradient off by a factor moves them by far
#    more;
#  - on MPI layouts (tp, ep, dp, pp, activation checkpointing) bf16 compute equals one process in
#    bf16 compute: loss, lm_loss and val_loss per step within 1 % over 20 steps. Not 1e-5 as in fp32:
#    another summation order moves a sum in its last fp32 bit, and bf16 rounding of the next GEMM's
#    input turns that into a 2⁻⁹ step (measured up to 0.3 % on loss; 16-bit storage alone 0.04 %).
# As is: emulated bf16 compute (TED_GEMM=bf16-emulated), on any CPU. With TED_BF16_NATIVE=1 (the
# test test_bf16_compute_native): the CPU's bf16 instructions through oneDNN; exit 77 (skipped)
# where there are none.
set -uo pipefail
: "${TED:?}" "${TED_ROOT:?}" "${TED_TMP:?}"
rm -rf "$TED_TMP" && mkdir -p "$TED_TMP"
cd "$TED_ROOT"
source tests/mpi_env.sh
export OMP_NUM_THREADS=1
T=$TED_TMP
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
if [ "${TED_BF16_NATIVE:-0}" = 1 ]; then unset TED_GEMM; else export TED_GEMM=bf16-emulated; fi

small=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 64 --n-head 4 --n-positions 64 --seq-len 64
       --micro-batch 8 --lr 2e-3 --warmup 5 --log-every 1000 --eval-windows 32 "${STATED_PEAK[@]}")
"$TED" train "${small[@]}" --steps 1 --bf16 >$T/line.out 2>&1
line=$(grep '^gemm:' $T/line.out)
if [ "${TED_BF16_NATIVE:-0}" = 1 ] && ! grep -q '^gemm: bf16 compute (' <<<"$line"; then
  echo "skipped: no bf16 compute on this CPU: $line"; exit 77
fi
grep -q '^gemm: bf16 compute' <<<"$line" && ok "--bf16: $line" || bad "--bf16 start-up line: $line"
"$TED" train "${small[@]}" --steps 1 >$T/line32.out 2>&1
grep -q '^gemm: fp32 on ' $T/line32.out && ok "fp32: $(grep '^gemm:' $T/line32.out)" || bad "fp32 line: $(grep '^gemm:' $T/line32.out)"

# determinism, and bf16 compute against fp32 on four models
moe=(--num-experts 4 --top-k 2 --moe-every 1)
declare -A models=([moe-capacity]="${moe[*]} --capacity-factor 1.0" [moe-dropless]="${moe[*]} --capacity-factor 0"
                   [dense]="--num-experts 1" [llama-moe]="${moe[*]} --arch llama --n-kv-head 2 --expert-type swiglu --router mixtral")
for name in moe-capacity moe-dropless dense llama-moe; do
  read -ra extra <<<"${models[$name]}"
  "$TED" train "${small[@]}" "${extra[@]}" --steps 40 --log $T/$name-32.jsonl >/dev/null 2>&1
  "$TED" train "${small[@]}" "${extra[@]}" --steps 40 --bf16 --log $T/$name-16.jsonl >/dev/null 2>&1
  if [ $name = moe-capacity ]; then
    "$TED" train "${small[@]}" "${extra[@]}" --steps 40 --bf16 --log $T/$name-16b.jsonl >/dev/null 2>&1
    cmp -s <(cut -d, -f1-6 $T/$name-16.jsonl | grep -v '^{"run"') <(cut -d, -f1-6 $T/$name-16b.jsonl | grep -v '^{"run"') &&
      ok "$name: bf16 compute twice, the same losses bit for bit" || bad "$name: two bf16 compute runs differ"
  fi
  if d=$(compare_logs $T/$name-32.jsonl $T/$name-16.jsonl 1e-2 loss,lm_loss,val_loss); then
    ok "$name: bf16 compute against fp32, every step's loss within $d over 40 steps"
  else bad "$name: bf16 compute against fp32: $d"; fi
done

# MPI layouts in bf16 compute against one process in bf16 compute
GLOBAL=8
dist=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 8 --n-positions 32 --seq-len 16
      --grad-accum 2 --num-experts 8 --top-k 2 --moe-every 1 --min-capacity 1 --steps 20 --lr 3e-3 --warmup 4
      --eval-every 10 --eval-windows 16 --log-every 100 --bf16 "${STATED_PEAK[@]}")
for cf in 1.0 0; do
  "$TED" train "${dist[@]}" --capacity-factor $cf --micro-batch $GLOBAL --log $T/one-$cf.jsonl >/dev/null 2>&1
  layouts=("2 2 1 1" "2 1 2 1" "4 2 2 1" "8 2 4 1")
  [ $cf = 0 ] && layouts=("4 1 4 1" "4 2 2 1 --activation-checkpointing" "2 1 1 2")
  for layout in "${layouts[@]}"; do
    read -r np tp ep pp sw <<<"$layout"
    dp=$((np / tp / pp)); out=$T/l-$cf-$np-$tp-$ep-$pp${sw:+-ckpt}
    "${MPIRUN[@]}" -np "$np" "$TED" train "${dist[@]}" --capacity-factor $cf --micro-batch $((GLOBAL / dp)) --tp "$tp" \
      --ep "$ep" --pp "$pp" $sw --log $out.jsonl >$out.out 2>&1 || { bad "np $np tp $tp ep $ep pp $pp $sw: exit"; tail -3 $out.out; continue; }
    if d=$(compare_logs $T/one-$cf.jsonl $out.jsonl 1e-2 loss,lm_loss,val_loss); then
      ok "cf $cf np $np tp $tp ep $ep pp $pp $sw: bf16 compute equals one process within $d"
    else bad "cf $cf np $np tp $tp ep $ep pp $pp $sw: $d"; fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
