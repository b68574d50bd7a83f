#!/usr/bin/env bash
# The GPU path of ted on the CPU, under the CUDA emulation of tests/cuda_emu (no GPU needed):
#  - the op tests test_cuda_kernels / test_cuda_moe / test_cuda_fused, built against the
#    emulation, pass (under each of three schedules of the threads of a block);
#  - `ted_emu train --device cuda` (the real src/*.c and src/cuda/*.cu) gives per-step losses
#    and gradient norms within 1e-4 of `ted train` on the CPU for a tiny MoE model (gradient
#    accumulation, a learning rate at which 5 steps move the weights measurably), in
#    capacity and dropless mode, with shapes that are not whole warps, with activation
#    checkpointing, and with --fp16 (against the CPU's --fp16 run); with --bf16 (bf16 GEMMs)
#    within 2e-2 of the fp32 CPU run;
#  - 4 ranks (tp 2, ep 2; dp 2, so 2 sequences each), which share the one emulated device and
#    so take comm.c's host-staged path, equal the one-rank CPU run within 1e-4, also with
#    --dtd --cac; with --bf16 they are within 2e-2 of one emulated bf16 rank (bf16 weights:
#    a rounding that flips makes runs drift apart, on the CPU as well);
#  - its step-5 weights and optimizer state equal the CPU's within 1e-4 (compare_weights); a
#    run resumed from its step-3 checkpoint equals the unbroken emulated run within 1e-6, one
#    resumed from the CPU's step-3 checkpoint the CPU run within 1e-4.
# Needs TED_EMU (the ted_emu binary, set by tests.cmake); exits 77 (skipped) without it.
source "${TED_ROOT:?}/tests/lib.sh"
if [ -z "${TED_EMU:-}" ] || [ ! -x "$TED_EMU" ]; then
  echo "test_cuda_emu: skipped: ted_emu was not built (needs a C++ compiler, Python 3 and the CUDA headers)"
  exit 77
fi
source tests/mpi_env.sh
bin=$(dirname "$TED_EMU")

# the op tests, under each schedule of a block's threads (emu.cpp): round robin; the lowest
# ready thread first; the highest first (the last two expose a missing __syncthreads)
for sched in roundrobin low high; do
  for t in test_cuda_kernels_emu test_cuda_moe_emu test_cuda_fused_emu; do
    if TED_EMU_SCHEDULE=$sched "$bin/$t" >"$TED_TMP/$t-$sched.out" 2>&1; then ok "$t ($sched)"
    else bad "$t ($sched):"; grep -v " ok$" "$TED_TMP/$t-$sched.out" | tail -15; fi
  done
done

model=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 16
       --seq-len 16 --micro-batch 4 --num-experts 4 --top-k 2 --moe-every 1 --min-capacity 1 --steps 5
       --grad-accum 2 --lr 3e-3 --warmup 2 --eval-every 5 --eval-windows 4 --log-every 100)
# compare_logs (mpi_env.sh), and the gradient norm too: Adam's updates hardly change when a
# gradient is off by a factor, the norm does
compare_norms() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
def steps(path): return [r for r in map(json.loads, open(path)) if "grad_norm" in r]
a, b, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b), f"{len(b)} steps, {len(a)} in {sys.argv[1]}"
worst = max(abs(x["grad_norm"] - y["grad_norm"]) / max(abs(x["grad_norm"]), 1e-3) for x, y in zip(a, b))
assert worst <= tol, f"{sys.argv[2]}: grad_norm differs from {sys.argv[1]} by {worst:.2e} (tolerance {tol})"
print(f"{worst:.1e}")
PY
}
check() {   # check NAME REF OUT TOL: per-step losses, val_loss and grad_norm of OUT within TOL of REF
  local l n
  if l=$(compare_logs "$2" "$3" "$4" 2>&1) && n=$(compare_norms "$2" "$3" "$4" 2>&1); then ok "$1: losses $l, norms $n"
  else bad "$1: $l ${n:-}"; fi
}
run() {     # run NAME ARGS...: one training run, its log in $TED_TMP/NAME.jsonl
  local name=$1; shift
  "$@" --log "$TED_TMP/$name.jsonl" >"$TED_TMP/$name.out" 2>&1 ||
    { echo "FAIL $name:"; { grep -m 3 "^emu:\|^ted:" "$TED_TMP/$name.out" || tail -5 "$TED_TMP/$name.out"; } | cut -c1-300; }
}
for cf in 1.0 0; do
  save=(); [ $cf = 1.0 ] && save=(--save-every 3 --save "$TED_TMP/ck-cpu")
  run cpu-$cf "$TED" train "${model[@]}" --capacity-factor $cf "${save[@]}"
  run emu-$cf "$TED_EMU" train "${model[@]}" --capacity-factor $cf --device cuda
  check "fp32 emulated gpu = cpu (capacity factor $cf)" "$TED_TMP/cpu-$cf.jsonl" "$TED_TMP/emu-$cf.jsonl" 1e-4
done
# shapes that are not whole warps: d 48, T 40 (loops of several rounds per lane), 6 experts
odd=(--n-embd 48 --n-head 4 --n-positions 40 --seq-len 40 --micro-batch 3 --num-experts 6)
run cpu-odd "$TED" train "${model[@]}" "${odd[@]}" --capacity-factor 0
run emu-odd "$TED_EMU" train "${model[@]}" "${odd[@]}" --capacity-factor 0 --device cuda
check "fp32 emulated gpu = cpu (d 48, T 40, 6 experts, dropless)" "$TED_TMP/cpu-odd.jsonl" "$TED_TMP/emu-odd.jsonl" 1e-4
run emu-ac "$TED_EMU" train "${model[@]}" --device cuda --activation-checkpointing
check "fp32 emulated gpu with activation checkpointing = cpu" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu-ac.jsonl" 1e-4
run emu-bf16 "$TED_EMU" train "${model[@]}" --device cuda --bf16
check "bf16 emulated gpu within 2e-2 of fp32 cpu" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu-bf16.jsonl" 2e-2
run cpu-fp16 "$TED" train "${model[@]}" --fp16
run emu-fp16 "$TED_EMU" train "${model[@]}" --device cuda --fp16
check "fp16 emulated gpu = fp16 cpu" "$TED_TMP/cpu-fp16.jsonl" "$TED_TMP/emu-fp16.jsonl" 1e-4
# 4 ranks: dp = 4 / tp = 2, so 2 sequences per rank make the one-rank global batch of 4
four=("${MPIRUN[@]}" -np 4 "$TED_EMU" train "${model[@]}" --micro-batch 2 --device cuda --tp 2 --ep 2)
run emu4 "${four[@]}"
check "4 emulated ranks (tp 2, ep 2) = 1 cpu rank" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu4.jsonl" 1e-4
run emu4-opt "${four[@]}" --dtd --cac
check "4 emulated ranks (tp 2, ep 2, --dtd --cac) = 1 cpu rank" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu4-opt.jsonl" 1e-4
run emu4-bf16 "${four[@]}" --bf16
check "bf16 4 emulated ranks (tp 2, ep 2) within 2e-2 of 1 emulated rank" "$TED_TMP/emu-bf16.jsonl" "$TED_TMP/emu4-bf16.jsonl" 2e-2
# the pipeline on emulated GPUs: 2 stages of tp 2, messages staged through the host
run emu4-pp "${MPIRUN[@]}" -np 4 "$TED_EMU" train "${model[@]}" --device cuda --pp 2 --tp 2
check "4 emulated ranks (pp 2, tp 2) = 1 cpu rank" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu4-pp.jsonl" 1e-4
# checkpoints at step 3 (of a 5-step run: the schedule stays that of 5 steps) and 5: the
# emulated GPU's weights and optimizer state equal the CPU's; resumed from step 3 (its own
# checkpoint, or the CPU's), it continues as the unbroken run
run emu-save "$TED_EMU" train "${model[@]}" --device cuda --save-every 3 --save "$TED_TMP/ck"
check "emulated run that saves = unbroken emulated run" "$TED_TMP/emu-1.0.jsonl" "$TED_TMP/emu-save.jsonl" 1e-6
for f in model optimizer; do
  if l=$(compare_weights "$TED_TMP/ck-cpu/step_00000005/$f.safetensors" "$TED_TMP/ck/step_00000005/$f.safetensors" \
         1e-4 2>&1); then ok "step-5 $f.safetensors of the emulated gpu = cpu: $l"; else bad "step-5 $f.safetensors: $l"; fi
done
resumed() {   # resumed NAME REF OUT TOL: OUT, resumed at step 4, has REF's losses for steps 4-5
  local l
  if l=$(/usr/bin/python3 - "$2" "$3" "$4" 2>&1 <<'PY'
import json, sys
keys = ("loss", "lm_loss", "aux_loss", "val_loss")
def read(path): return {(r["step"], k): r[k] for r in map(json.loads, open(path)) for k in keys if k in r}
ref, got, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
assert sorted({s for s, _ in got}) == [4, 5], f"resumed steps: {sorted({s for s, _ in got})}"
assert all(key in ref for key in got), f"{sorted(set(got) - set(ref))} not in {sys.argv[1]}"
worst = max(abs(v - ref[key]) / max(abs(ref[key]), 1e-3) for key, v in got.items())
assert worst <= tol, f"resumed steps differ by {worst:.2e} (tolerance {tol})"
print(f"steps 4-5 within {worst:.1e}")
PY
  ); then ok "$1: $l"; else bad "$1: $l"; fi
}
run emu-resume "$TED_EMU" train "${model[@]}" --device cuda --resume "$TED_TMP/ck/step_00000003"
resumed "emulated resume from step 3 = unbroken emulated run" "$TED_TMP/emu-1.0.jsonl" "$TED_TMP/emu-resume.jsonl" 1e-6
run emu-resume-cpu "$TED_EMU" train "${model[@]}" --device cuda --resume "$TED_TMP/ck-cpu/step_00000003"
resumed "emulated resume from the cpu's step-3 checkpoint = cpu" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu-resume-cpu.jsonl" 1e-4
summary
