#!/usr/bin/env bash
# ted plan against the memory model worked by hand (docs/design.md §5), and its bad input.
source "${TED_ROOT:?}/tests/lib.sh"
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
# the activations each schedule keeps on stage 0 (model/memplan.h: every buffer ted train allocates for
# this shape): gpipe all 8 micro-batches of its one chunk, 1f1b pp = 2, interleaved (v 2) 6 chunk views
# (pp·(v−1) + 2·(pp−1) = 4 warm-up forwards, plus what each chunk holds while it runs); 1f1b < interleaved < gpipe
gp=$(sed -n 's|.*gpipe  *8 micro-batch x chunk views of [0-9]* bytes: \([0-9]*\) bytes.*|\1|p' <<<"$out")
fb=$(sed -n 's|.*1f1b  *2 micro-batch x chunk views of [0-9]* bytes: \([0-9]*\) bytes.*|\1|p' <<<"$out")
il=$(sed -n 's|.*interleaved  *6 micro-batch x chunk views of [0-9]* bytes: \([0-9]*\) bytes.*|\1|p' <<<"$out")
expect "pp 2 activations: gpipe $gp > interleaved $il > 1f1b $fb bytes" '[ -n "$gp" ] && [ -n "$fb" ] && [ -n "$il" ] && [ "$gp" -gt "$il" ] && [ "$il" -gt "$fb" ]'
expect "pp 2 row: state plus the 1f1b activations" 'grep -q "9100000000 bytes (9.10 GB)  fits .* + activations $fb bytes" <<<"$out"'
# ZeRO stages and offload (M1 per parameter: weights 2 + gradients 2 (stage 2: 2/n) + 12 (stages 1, 2: 12/n);
# offload takes the 12 off the GPU): tp 2 ep 2 of 8 GPUs, dp 4, edp 2, 4.3333e8 non-expert, 8.6667e8 expert
for zs in "0 16 16" "1 7 10" "2 5.5 9" "2o 2.5 3"; do
  read -r z a b <<<"$zs"
  want=$(/usr/bin/python3 -c "print(round(1.3e9 * 2 / 3 / 2 * $a + 1.3e9 * 8 / 3 / 4 * $b))")
  out=$("$TED" plan --base-params 1.3e9 --experts 8 --gpus 8 --tp 2 --ep 2 --zero-stage ${z%o} $([ "$z" = 2o ] && echo --offload))
  got=$(sed -n 's|^  tp 2   ep 2    dp 4     edp 2  *\([0-9]*\) bytes.*|\1|p' <<<"$out")
  expect "--zero-stage $z: $got bytes = $want" '[ -n "$got" ] && [ $((got - want)) -ge -1 ] && [ $((got - want)) -le 1 ]'
done
for bad in "--experts 8 --gpus 8" "--base-params x --experts 8 --gpus 8" "--base-params 1e9 --experts 8 --gpus 8 --tp 3" \
           "--base-params 1e9 --experts 8 --gpus 8 --precision fp8" "--base-params 1e9 --experts 8 --gpus 8 --frob 1" "--base-params 1e9 --experts 8 --gpus 8 --pp 3" \
           "--base-params 1e9 --experts 8 --gpus 8 --zero-stage 3" "--base-params 1e9 --experts 8 --gpus 8 --device tpu" \
           "--base-params inf --experts 8 --gpus 8" "--base-params nan --experts 8 --gpus 8" \
           "--base-params -1e9 --experts 8 --gpus 8" "--base-params 1e9 --experts 8 --gpus 8 --gpu-mem inf" \
           "--base-params 1e9 --experts 1e30 --gpus 8" "--base-params 1e9 --experts 8 --gpus 1e12" \
           "--base-params 1e9 --experts 8.5 --gpus 8" "--base-params 1e9 --experts 8 --gpus 8 --pp 2 --micro-batches 1e15" \
           "--base-params 1e9 --experts 8 --gpus 8 --hidden 1e12 --layers 2 --seq-len 8 --micro-batch 1 --heads 2"; do
  set +e; err=$("$TED" plan $bad 2>&1 >/dev/null); rc=$?; set -e
  expect "bad input ($bad): exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l <<<"$err") -eq 1 ] && grep -q "^ted: plan" <<<"$err"'
done
# the shape flags get ted train's bounds (a million layers would be registered one by one)
set +e; err=$("$TED" plan --base-params 1e9 --experts 8 --gpus 8 --hidden 64 --layers 1000000 --seq-len 8 --micro-batch 1 \
              --heads 2 2>&1 >/dev/null); rc=$?; set -e
expect "--layers 1000000 refused: $err" '[ $rc -eq 2 ] && [ "$err" = "ted: invalid config: n_layer (1000000) must be in [1, 4096]" ]'
# sizes with suffixes: 1.3B and 80GB are 1.3e9 and 80e9
expect "6.7B / 80GB suffixes" '[ "$("$TED" plan --base-params 1.3B --experts 8 --gpus 8 --gpu-mem 80GB)" = "$("$TED" plan --base-params 1.3e9 --experts 8 --gpus 8)" ]'
# --config: the exact tensors of a train config; one process: what ted train predicts and allocates
cd "${TED_ROOT:-.}"
line=$("$TED" train --config configs/moby.json --data data/moby-dick.txt --steps 0 --threads 1 2>&1 | grep "^memory per rank:")
pred=$(sed -n 's|^memory per rank: model state predicted \([0-9]*\) bytes.*allocated \([0-9]*\) .*|\1 \2|p' <<<"$line")
out=$("$TED" plan --config configs/moby.json --gpus 1)
expect "plan --config = ted train's prediction = its allocation ($pred bytes)" '[ -n "$pred" ] && [ "${pred% *}" = "${pred#* }" ] && grep -q "^  tp 1   ep 1    dp 1     edp 1  *${pred% *} bytes  fits" <<<"$out"'
pred=${pred% *}
# --config with --pp 2 on 2 GPUs: the fuller stage holds about half the model (the tied wte on both: a
# little more), dp 1 as above; the pipeline rows follow, from the config's own shape; a --pp that does
# not divide --gpus is refused
out=$("$TED" plan --config configs/moby.json --gpus 2 --pp 2)
half=$(sed -n 's|^  pp 2    tp 1   ep 1    dp 1     edp 1  *\([0-9]*\) bytes.*|\1|p' <<<"$out")
expect "plan --config --pp 2: a stage holds about half ($half of $pred bytes)" \
  '[ -n "$half" ] && [ $(( 100 * half / pred )) -ge 50 ] && [ $(( 100 * half / pred )) -le 55 ] && grep -q "^pipeline pp 2" <<<"$out"'
set +e; err=$("$TED" plan --config configs/moby.json --gpus 4 --pp 3 2>&1 >/dev/null); rc=$?; set -e
expect "plan --config --pp 3 of 4 GPUs refused: $err" '[ $rc -eq 2 ] && [ "$err" = "ted: plan: --pp 3 does not divide --gpus 4" ]'
# The plan against what ted train's metrics report (the `mem` record of the JSONL log, rank 0): model
# state (params, grads, optimizer) for ZeRO 0, 1, 2 on 1, 2 and 4 ranks, and the activations (the
# forward's peak of the activations category), dense and with a sparse layout, checkpointing on and
# off, 1-bit Adam's error feedback. Both are counted from the same sizes, so the tolerance is the padding: 0 bytes (tested: 0.1 %).
source tests/mpi_env.sh
W=${TED_TMP:-/tmp/test_plan}; rm -rf "$W"; mkdir -p "$W"
cat >"$W/small.json" <<'JSON'
{"model": {"vocab_size": 256, "n_positions": 64, "n_embd": 64, "n_layer": 4, "n_head": 4},
 "moe": {"num_experts": 4, "top_k": 2, "moe_every": 2, "capacity_factor": 1.25},
 "train_micro_batch_size_per_gpu": 4, "seq_len": 64, "train_steps": 1}
JSON
cat >"$W/sparse.json" <<'JSON'
{"model": {"vocab_size": 256, "n_positions": 256, "n_embd": 64, "n_layer": 2, "n_head": 4},
 "train_micro_batch_size_per_gpu": 2, "seq_len": 256, "train_steps": 1,
 "sparse_attention": {"mode": "fixed", "block": 16, "num_local_blocks": 4, "num_global_blocks": 1}}
JSON
sed 's|"train_steps": 1}|"train_steps": 1, "optimizer": {"type": "OneBitAdam", "params": {"lr": 0.001, "freeze_step": 2}}, "zero_optimization": {"stage": 0}}|' \
  "$W/small.json" >"$W/onebit.json"
measured() {  # NP CONFIG FLAGS... -> "params+grads+optimizer activations" of rank 0's first step
  local np=$1 cfg=$2; shift 2
  rm -f "$W/m.jsonl"
  OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np "$np" "$TED" train --config "$cfg" --data data/moby-dick.txt --steps 1 --threads 1 \
    --eval-windows 1 --log "$W/m.jsonl" "$@" >"$W/m.out" 2>&1 || { tail -3 "$W/m.out" >&2; return 1; }
  /usr/bin/python3 -c "
import json
m = [o for o in map(json.loads, open('$W/m.jsonl')) if 'mem' in o][0]['mem']
print(m['params'] + m['grads'] + m['optimizer'], m['by_phase']['forward']['activations'])"
}
planned() {  # GPUS CONFIG TP EP FLAGS... -> "state activations" of plan's row
  local g=$1 cfg=$2 tp=$3 ep=$4; shift 4
  local a=() ck=0   # train's flags in plan's words; checkpointing: the row's other setting
  while [ $# -gt 0 ]; do
    case $1 in --bf16) a+=(--precision bf16);; --grad-accum) a+=(--micro-batches "$2"); shift;;
      --activation-checkpointing) ck=1;; *) a+=("$1");; esac; shift
  done
  local row
  row=$(OMP_NUM_THREADS=1 "$TED" plan --config "$cfg" --gpus "$g" --tp "$tp" --ep "$ep" --device cpu "${a[@]}" |
    grep -E "^(  pp [0-9]+ *)?  tp $tp +ep $ep ")
  if [ $ck = 1 ]; then sed -n "s|^.* \([0-9]*\) bytes  fits .*checkpointing on: \([0-9]*\))|\1 \2|p" <<<"$row"
  else sed -n "s|^.* \([0-9]*\) bytes  fits .*; activations \([0-9]*\) bytes.*|\1 \2|p" <<<"$row"; fi
}
close() { /usr/bin/python3 -c "import sys; a, b = float('$1'), float('$2'); sys.exit(0 if abs(a - b) <= 1e-3 * max(a, b) else 1)"; }
for run in "1 small 1 1 --zero-stage 0" "1 small 1 1 --zero-stage 1" "1 small 1 1 --zero-stage 2 --bf16" \
           "2 small 1 2 --zero-stage 0" "2 small 1 2 --zero-stage 1" "2 small 1 2 --zero-stage 2" "2 small 2 1 --zero-stage 1 --bf16" \
           "4 small 2 2 --zero-stage 2 --bf16" "4 small 1 2 --zero-stage 1 --activation-checkpointing" \
           "2 onebit 1 2" "2 sparse 1 1 --zero-stage 1" "2 sparse 1 1 --zero-stage 1 --activation-checkpointing" "2 small 1 1 --pp 2 --grad-accum 2"; do
  read -r np cfg tp ep rest <<<"$run"
  layout=(--tp "$tp" --ep "$ep")
  m=$(measured "$np" "$W/$cfg.json" "${layout[@]}" $rest); p=$(planned "$np" "$W/$cfg.json" "$tp" "$ep" $rest)
  expect "$np ranks, $cfg, tp $tp ep $ep $rest: plan (state, activations) $p, measured $m" \
    '[ -n "$m" ] && [ -n "$p" ] && close ${p% *} ${m% *} && close ${p#* } ${m#* }'
done
# offload from the config's own key (as train spells it) or --offload: on a GPU the optimizer state (fp32
# master, m, v: 12 bytes a parameter, never in place) leaves the device for the host
sed 's|"train_steps": 1}|"train_steps": 1, "zero_optimization": {"offload_optimizer": {"device": "cpu"}}}|' "$W/small.json" >"$W/off.json"
on=$("$TED" plan --config "$W/small.json" --gpus 1 --device cuda | grep "^  tp 1   ep 1 ")
for off in "$W/off.json" "$W/small.json --offload"; do
  row=$("$TED" plan --config $off --gpus 1 --device cuda | grep "^  tp 1   ep 1 ")
  read -r P G O <<<"$(sed -n 's|.*(params \([0-9]*\), grads \([0-9]*\), optimizer \([0-9]*\)).*|\1 \2 \3|p' <<<"$on")"
  expect "offload ($off): state $P + $G on the GPU, optimizer $O on the host" \
    '[ -n "$O" ] && [ "$O" -eq $((12 * P / 4)) ] && grep -q " $((P + G)) bytes  fits  (params $P, grads $G, optimizer 0, on the host $O)" <<<"$row"'
done
# the GPU's attention is flash attention: no T×T probabilities (34.36 GB at T 8192 over 8 layers of 16
# heads), each query's log-sum-exp instead, so the 1.46 B MoE bench shape at T 8192, micro-batch 1, fits 80 GB;
# and the rooms a bf16 GPU run keeps in bf16 alone (ln1, qkv, atty, ln2, the MLPs' and experts' h and
# hg, the experts' input rows and outputs) are half size: 11.43 GB of activations, 11.70 with the
# experts' outputs in fp32, 11.83 with an MoE block's ln2 too, 12.10 with the experts' input rows as
# well, 12.23 with a dense block's ln2, 13.84 with h, 16.80 with all in fp32
printf '{"model": {"vocab_size": 50304, "n_positions": 8192, "n_embd": 2048, "n_layer": 8, "n_head": 16, "n_inner": 8192},
 "moe": {"num_experts": 8, "top_k": 2, "moe_every": 2, "capacity_factor": 0},
 "train_micro_batch_size_per_gpu": 1, "seq_len": 8192}\n' >"$W/t8192.json"
out=$("$TED" plan --config "$W/t8192.json" --gpus 1 --device cuda --precision bf16)
read -r S A <<<"$(sed -n 's|^  tp 1   ep 1 .* \([0-9]*\) bytes  fits .*; activations \([0-9]*\) bytes.*|\1 \2|p' <<<"$out")"
expect "T 8192 on an 80 GB GPU: state $S + activations $A bytes, no T×T term, bf16 rooms half size" \
  '[ -n "$A" ] && [ "$A" -lt 11500000000 ] && [ $((S + A)) -lt 80000000000 ] &&
   grep -q "flash on the GPU: no probabilities kept (34359738368 bytes .* the log-sum-exp, 4194304 bytes" <<<"$out"'
summary
