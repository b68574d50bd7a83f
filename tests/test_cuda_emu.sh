#!/usr/bin/env bash
# The GPU path of ted on the CPU, under the CUDA emulation of tests/cuda_emu (no GPU needed):
#  - the op tests test_cuda_kernels / test_cuda_moe / test_cuda_fused, built against the
#    emulation, pass (under each of three schedules of the threads of a block; the first two also
#    with the blocks of every launch in reverse and in random order); two bf16 training runs,
#    one with each block order, agree bit for bit;
#  - the emulated cuBLAS takes bf16 GEMMs (the products of the bf16 values, C rounded to its
#    type), refuses what the library refuses (bf16 A with fp32 B; the grouped GEMM's bf16 A and
#    B with fp32 C), and stops a run that gives fp32 operands to a FAST_* compute type (emu_probe);
#  - `ted_emu train --device cuda` (the real src/*.c and src/cuda/*.cu) gives per-step losses
#    and gradient norms within 1e-6 of `ted train` on the CPU for a tiny MoE model (gradient
#    accumulation, a learning rate at which 5 steps move the weights measurably), in
#    capacity and dropless mode, with shapes that are not whole warps, with a dense block before
#    the MoE one, with activation checkpointing, and with --fp16 (against the CPU's --fp16 run, 1e-4);
#  - --bf16 (bf16 weights and GEMM operands, fp32 gradients; every GEMM of the run on bf16
#    operands): over 20 steps, loss and val_loss within 2 % of the fp32 CPU run in capacity and
#    dropless mode, with a dense block, with activation checkpointing, with ZeRO 1 and 2 (2 ranks), and on 4 ranks
#    (tp 2, ep 2) also with DTD + CAC (a dense block under checkpointing + CAC: 5 steps);
#  - 4 ranks (tp 2, ep 2; dp 2, so 2 sequences each), which share the one emulated device and
#    so take comm.c's host-staged path, equal the one-rank CPU run within 1e-6, also with
#    --dtd --cac, and with a dense block under checkpointing + CAC;
#  - its step-5 weights and optimizer state equal the CPU's within 1e-4 (compare_weights); a
#    run resumed from its step-3 checkpoint equals the unbroken emulated run within 1e-6, one
#    resumed from the CPU's step-3 checkpoint the CPU run within 1e-4.
#  - every run above with TED_FRESH_POISON=1: the gradients the optimizer left fresh are NaN until
#    an op of the next backward overwrites or zeroes them, so an op that skips that shows as NaN.
# Needs TED_EMU (the ted_emu binary, set by tests.cmake); exits 77 (skipped) without it.
source "${TED_ROOT:?}/tests/lib.sh"
if [ -z "${TED_EMU:-}" ] || [ ! -x "$TED_EMU" ]; then
  echo "test_cuda_emu: skipped: ted_emu was not built (needs a C++ compiler, Python 3 and the CUDA headers)"
  exit 77
fi
source tests/mpi_env.sh
bin=$(dirname "$TED_EMU")
# A gradient that an op reads or accumulates into before any op of the step wrote it (nn/fresh.h:
# the optimizer leaves the consumed gradients "fresh" instead of zeroing them) is NaN, and so the run.
export TED_FRESH_POISON=1

# the emulated cuBLAS: bf16 GEMMs computed as the types say; refusals; FAST_* on fp32 stops the run
probe() {   # probe MODE RC TEXT: emu_probe MODE exits RC and prints TEXT
  local out rc=0
  out=$("$bin/emu_probe" "$1" 2>&1) || rc=$?
  if [ $rc -eq "$2" ] && grep -q "$3" <<<"$out"; then ok "emu_probe $1: exit $rc, \"$3\""
  else bad "emu_probe $1: exit $rc (want $2), output: $(head -c 300 <<<"$out")"; fi
}
probe bf16 0 "the products of the bf16 values, C rounded to its type"
probe fast16bf 134 "FAST_\*) on fp32 operands: the library may round them to TF32"
probe fasttf32 134 "FAST_\*) on fp32 operands"
probe mixed 3 "A CUDA_R_16BF, B CUDA_R_32F, C CUDA_R_32F with compute type 68 is not a combination"
probe grouped 3 "cublasGemmGroupedBatchedEx: A CUDA_R_16BF, B CUDA_R_16BF, C CUDA_R_32F with compute type 68 is not"
# two streams: a missing wait reads memory not yet written under the order that runs the reader
# first (late: side streams last, a missing join; early: side streams first, a missing fork)
for o in late early; do
  w=$([ $o = late ] && echo join || echo fork)
  TED_EMU_STREAMS=$o probe "$w-nowait" 4 "read memory not yet written"
  TED_EMU_STREAMS=$o probe "$w-wait" 0 "read the value made"
done

# Runs that need one core go two at a time (the emulation is one thread; the CPU runs' threads
# wait passively): bg starts one when fewer than two are running, settle waits for all of them;
# their checks read the logs after settle. The MPI runs (2 and 4 ranks) go one at a time.
bg() { while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done; "$@" & }
settle() { wait || true; }
optest() {   # optest OUT BIN: the op test BIN (in the environment given), its output in OUT.out, exit status in OUT.rc
  local rc=0
  "$bin/$2" >"$TED_TMP/$1.out" 2>&1 || rc=$?
  echo $rc >"$TED_TMP/$1.rc"
}
optest_check() {   # optest_check OUT NAME
  if [ "$(cat "$TED_TMP/$1.rc" 2>/dev/null)" = 0 ]; then ok "$2"
  else bad "$2:"; grep -v " ok$" "$TED_TMP/$1.out" | tail -15 || true; fi
}
# the op tests, under each schedule of a block's threads (emu.cpp): round robin; the lowest
# ready thread first; the highest first (the last two expose a missing __syncthreads)
ops=(test_cuda_kernels_emu test_cuda_moe_emu test_cuda_fused_emu)
for sched in roundrobin low high; do
  for t in "${ops[@]}"; do TED_EMU_SCHEDULE=$sched bg optest "$t-$sched" $t; done
done
# the bf16 flash kernels with one buffer for each streamed tile, as where an SM's shared memory
# holds two blocks of one but not of two (sm_80); the emulation has sm_90's and runs two
TED_FLASH_BUFFERS=1 TED_EMU_SCHEDULE=high bg optest fused-nb1 test_cuda_fused_emu
# and with the blocks of every launch in reverse and in random order: the MoE plan (capacity scan,
# rows) and the optimizer's norm are the CPU's whatever order the blocks run in
for order in reverse random; do
  for t in "${ops[@]:0:2}"; do TED_EMU_BLOCK_ORDER=$order bg optest "$t-$order" $t; done
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
# the single-process runs, two at a time (bg); each one's check is below, after settle
odd=(--n-embd 48 --n-head 4 --n-positions 40 --seq-len 40 --micro-batch 3 --num-experts 6)
long=("${model[@]}" --steps 20 --eval-every 10)
bf=("${long[@]}" --device cuda --bf16)
for cf in 1.0 0; do
  save=(); [ $cf = 1.0 ] && save=(--save-every 3 --save "$TED_TMP/ck-cpu")
  bg run cpu-$cf "$TED" train "${model[@]}" --capacity-factor $cf "${save[@]}"
  bg run emu-$cf "$TED_EMU" train "${model[@]}" --capacity-factor $cf --device cuda
done
TED_EMU_BLOCK_ORDER=random bg run emu-random "$TED_EMU" train "${model[@]}" --device cuda --bf16
TED_EMU_BLOCK_ORDER=reverse bg run emu-reverse "$TED_EMU" train "${model[@]}" --device cuda --bf16
TED_GEMM_LT=0 bg run emu-gemmex "$TED_EMU" train "${model[@]}" --device cuda --bf16
TED_GEMM_LT=0 bg run emu-gemmex-0 "$TED_EMU" train "${model[@]}" --device cuda --bf16 --capacity-factor 0
TED_LT_TUNE=1 bg run emu-lt-0 "$TED_EMU" train "${model[@]}" --device cuda --bf16 --capacity-factor 0
TED_FRESH_POISON=0 TED_GPU_PROF=2 bg run emu-prof "$TED_EMU" train "${model[@]}" --device cuda --bf16
bg run cpu-odd "$TED" train "${model[@]}" "${odd[@]}" --capacity-factor 0
bg run emu-odd "$TED_EMU" train "${model[@]}" "${odd[@]}" --capacity-factor 0 --device cuda
bg run cpu-dense "$TED" train "${model[@]}" --moe-every 2
bg run emu-dense "$TED_EMU" train "${model[@]}" --moe-every 2 --device cuda
bg run emu-ac "$TED_EMU" train "${model[@]}" --device cuda --activation-checkpointing
bg run cpu-fp16 "$TED" train "${model[@]}" --fp16
bg run emu-fp16 "$TED_EMU" train "${model[@]}" --device cuda --fp16
bg run emu-save "$TED_EMU" train "${model[@]}" --device cuda --save-every 3 --save "$TED_TMP/ck"
bg run cpu20 "$TED" train "${long[@]}"
bg run cpu20-0 "$TED" train "${long[@]}" --capacity-factor 0
TED_EMU_STATS=1 bg run b20 "$TED_EMU" train "${bf[@]}"
bg run b20-0 "$TED_EMU" train "${bf[@]}" --capacity-factor 0
bg run cpu20-dense "$TED" train "${long[@]}" --moe-every 2
bg run b20-dense "$TED_EMU" train "${bf[@]}" --moe-every 2
bg run b20-ac "$TED_EMU" train "${bf[@]}" --activation-checkpointing
export TED_OPT_PART=3000   # with TED_OPT_OVERLAP=1: AdamW beside the next forward, a part a tensor or two
TED_OPT_OVERLAP=1 bg run emu-overlap "$TED_EMU" train "${model[@]}" --device cuda --bf16
TED_OPT_OVERLAP=1 TED_EMU_STREAMS=early bg run emu-overlap-early "$TED_EMU" train "${model[@]}" --device cuda --bf16
bg run emu-dense-ac "$TED_EMU" train "${model[@]}" --device cuda --bf16 --moe-every 2 --activation-checkpointing
TED_OPT_OVERLAP=1 bg run emu-overlap-dense-ac "$TED_EMU" train "${model[@]}" --device cuda --bf16 --moe-every 2 \
  --activation-checkpointing
TED_MOE_ROWS16=0 bg run emu-rows32 "$TED_EMU" train "${model[@]}" --device cuda --bf16
settle
for sched in roundrobin low high; do
  for t in "${ops[@]}"; do optest_check "$t-$sched" "$t ($sched)"; done
done
optest_check fused-nb1 "test_cuda_fused_emu (one buffer a streamed flash tile)"
for order in reverse random; do
  for t in "${ops[@]:0:2}"; do optest_check "$t-$order" "$t (blocks in $order order)"; done
done
for cf in 1.0 0; do
  check "fp32 emulated gpu = cpu (capacity factor $cf)" "$TED_TMP/cpu-$cf.jsonl" "$TED_TMP/emu-$cf.jsonl" 1e-6
done
# two runs of the GPU path agree bit for bit, whatever order the blocks of its kernels run in
check "bf16 emulated gpu: blocks in random order = in reverse order" "$TED_TMP/emu-reverse.jsonl" "$TED_TMP/emu-random.jsonl" 0
# a bf16 run's GEMMs through cublasGemmEx (TED_GEMM_LT=0) = through cuBLASLt with the algorithm
# kept per class of row counts (gemm_lt.cu): the same products, so the same bits. Dropless too,
# with the classes' candidates timed (TED_LT_TUNE=1): there the emulated heuristic's fastest
# candidate (split-K sums) gives other bits, and the timing must leave it out
check "bf16 emulated gpu: cublasGemmEx = cuBLASLt (TED_GEMM_LT=0)" "$TED_TMP/emu-gemmex.jsonl" "$TED_TMP/emu-random.jsonl" 0
check "bf16 emulated gpu, dropless: cublasGemmEx = cuBLASLt, its candidates timed" "$TED_TMP/emu-gemmex-0.jsonl" "$TED_TMP/emu-lt-0.jsonl" 0
# AdamW beside the next step's forward (TED_OPT_OVERLAP=1, zero.c) gives the step's bits in one
# launch: with the optimizer's stream run as late as the waits allow (a block whose forward read its
# weights before their part was done would read the old ones) and as early (a part that did not wait
# for the norm would read it unmade), and with a dense block under activation checkpointing
check "bf16 emulated gpu: AdamW beside the next forward = in one launch" "$TED_TMP/emu-random.jsonl" "$TED_TMP/emu-overlap.jsonl" 0
check "bf16 emulated gpu: AdamW beside the next forward, its stream run early = in one launch" \
  "$TED_TMP/emu-random.jsonl" "$TED_TMP/emu-overlap-early.jsonl" 0
check "bf16 emulated gpu: AdamW beside the next forward, a dense block, checkpointing = in one launch" \
  "$TED_TMP/emu-dense-ac.jsonl" "$TED_TMP/emu-overlap-dense-ac.jsonl" 0
# an MoE block's ln2, the experts' input rows and output gradients in bf16 alone (MoeLayer.rows16:
# the router's GEMMs, the dispatch and the experts read them so; the exchanges to the experts carry
# bf16 rows) = in fp32 with the casts at the GEMMs (TED_MOE_ROWS16=0), bit for bit: one rank here,
# ep 2 below
check "bf16 emulated gpu: MoE ln2 and expert rows in bf16 alone = fp32 and casts" "$TED_TMP/emu-random.jsonl" \
  "$TED_TMP/emu-rows32.jsonl" 0
# TED_GPU_PROF=1: one JSON line per rank with every kind of work; the optimizer is 3 launches a
# step (the norm's two, AdamW's one); the host waits at most once per MoE block and micro-batch,
# plus the loss of each micro-batch, the norm and the step's end (2 blocks, 2 micro-batches: 8); without
# the poison check, whose reads of the fresh gradients are host waits of their own. TED_GPU_PROF=2
# adds a line per site: the sites of a kind add up to its time, the slowest first; a GEMM's site
# is its shape (with its TFLOP/s) and its calls are the GEMM launches
if l=$(/usr/bin/python3 - "$TED_TMP/emu-prof.out" 2>&1 <<'PY'
import json, sys
lines = [json.loads(l)["gpu_prof"] for l in open(sys.argv[1]) if l.startswith('{"gpu_prof"')]
assert len(lines) == 1, f"{len(lines)} gpu_prof lines"
p = lines[0]
kinds = ["other", "gemm", "attention", "norm_elementwise", "cast", "moe", "optimizer", "loss", "copy", "comm", "idle"]
assert list(p["ms_per_step"]) == kinds + ["total"], list(p["ms_per_step"])
assert p["steps"] == 4 and p["first_step_left_out"], p
assert p["launches_per_step"]["optimizer"] == 3, p["launches_per_step"]
assert p["launches_per_step"]["gemm"] > 0 and p["launches_per_step"]["moe"] > 0, p["launches_per_step"]
assert p["host_syncs_per_step"] <= 2 * (2 + 1) + 2, p["host_syncs_per_step"]
sites = [json.loads(l)["gpu_prof_site"] for l in open(sys.argv[1]) if l.startswith('{"gpu_prof_site"')]
ms = [t["ms_per_step"] for t in sites]
assert sites and ms == sorted(ms, reverse=True), ms
for k in kinds:
    got = sum(t["ms_per_step"] for t in sites if t["kind"] == k)
    assert abs(got - p["ms_per_step"][k]) <= 0.01 + 0.01 * p["ms_per_step"][k], (k, got, p["ms_per_step"][k])
gemms = [t for t in sites if t["kind"] == "gemm"]
assert all(t["site"].startswith("gemm ") and "tflops" in t for t in gemms), gemms
assert any(" in cu_experts_backward" in t["site"] for t in gemms), [t["site"] for t in gemms]
assert abs(sum(t["calls_per_step"] for t in gemms) - p["launches_per_step"]["gemm"]) <= 0.05 * len(gemms) + 0.05, \
    p["launches_per_step"]  # each printed to 0.1
adamw = [t for t in sites if t["site"] == "cu_opt_adamw"]
assert len(adamw) == 1 and adamw[0]["calls_per_step"] == 1, adamw
print(f"{p['launches_per_step']['total']:.0f} launches, {p['host_syncs_per_step']:.0f} host waits a step,"
      f" {len(sites)} sites ({len(gemms)} GEMM shapes)")
PY
); then ok "TED_GPU_PROF=2: $l"; else bad "TED_GPU_PROF=2: $l"; fi
# shapes that are not whole warps: d 48, T 40 (loops of several rounds per lane), 6 experts
check "fp32 emulated gpu = cpu (d 48, T 40, 6 experts, dropless)" "$TED_TMP/cpu-odd.jsonl" "$TED_TMP/emu-odd.jsonl" 1e-6
# a dense block before the MoE one (--moe-every 2): the dense MLP's fused passes (bias + GELU with
# hg's bf16 copy, the GELU gradient with the bias gradient) and residual + LayerNorm there too
check "fp32 emulated gpu = cpu (a dense and an MoE block)" "$TED_TMP/cpu-dense.jsonl" "$TED_TMP/emu-dense.jsonl" 1e-6
check "fp32 emulated gpu with activation checkpointing = cpu" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu-ac.jsonl" 1e-6
check "fp16 emulated gpu = fp16 cpu" "$TED_TMP/cpu-fp16.jsonl" "$TED_TMP/emu-fp16.jsonl" 1e-4
# 4 ranks: dp = 4 / tp = 2, so 2 sequences per rank make the one-rank global batch of 4
four=("${MPIRUN[@]}" -np 4 "$TED_EMU" train "${model[@]}" --micro-batch 2 --device cuda --tp 2 --ep 2)
run emu4 "${four[@]}"
check "4 emulated ranks (tp 2, ep 2) = 1 cpu rank" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu4.jsonl" 1e-6
run emu4-opt "${four[@]}" --dtd --cac
check "4 emulated ranks (tp 2, ep 2, --dtd --cac) = 1 cpu rank" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu4-opt.jsonl" 1e-6
# CAC's recompute of a dense block (the MLP's first half alone, its output's sum stashed)
run emu4-cac "${four[@]}" --moe-every 2 --activation-checkpointing --cac
check "4 emulated ranks (tp 2, ep 2, a dense block, checkpointing + CAC) = 1 cpu rank" "$TED_TMP/cpu-dense.jsonl" \
  "$TED_TMP/emu4-cac.jsonl" 1e-6
# the same on bf16 (5 steps, the losses within 2 %): CAC's recompute writes the MLP's hg and the
# attention's output again as the bf16 copies the backward reads (mlp_forward, attn_proj_forward
# with no output)
run emu4-cac-bf16 "${four[@]}" --moe-every 2 --activation-checkpointing --cac --bf16
if l=$(compare_logs "$TED_TMP/cpu-dense.jsonl" "$TED_TMP/emu4-cac-bf16.jsonl" 2e-2 loss,val_loss 2>&1)
then ok "bf16 4 emulated ranks (a dense block, checkpointing + CAC) within 2 % of fp32 cpu: losses within $l"
else bad "bf16 4 emulated ranks (a dense block, checkpointing + CAC): $l"; fi
# the pipeline on emulated GPUs: 2 stages of tp 2, messages staged through the host
run emu4-pp "${MPIRUN[@]}" -np 4 "$TED_EMU" train "${model[@]}" --device cuda --pp 2 --tp 2
check "4 emulated ranks (pp 2, tp 2) = 1 cpu rank" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu4-pp.jsonl" 1e-6
# checkpoints at step 3 (of a 5-step run: the schedule stays that of 5 steps) and 5: the
# emulated GPU's weights and optimizer state equal the CPU's; resumed from step 3 (its own
# checkpoint, or the CPU's), it continues as the unbroken run
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
bg run emu-resume "$TED_EMU" train "${model[@]}" --device cuda --resume "$TED_TMP/ck/step_00000003"
bg run emu-resume-cpu "$TED_EMU" train "${model[@]}" --device cuda --resume "$TED_TMP/ck-cpu/step_00000003"
settle
resumed "emulated resume from step 3 = unbroken emulated run" "$TED_TMP/emu-1.0.jsonl" "$TED_TMP/emu-resume.jsonl" 1e-6
resumed "emulated resume from the cpu's step-3 checkpoint = cpu" "$TED_TMP/cpu-1.0.jsonl" "$TED_TMP/emu-resume-cpu.jsonl" 1e-4

# --bf16 over 20 steps against the fp32 CPU run: loss and val_loss within 2 % (bf16 weights: a
# rounding that flips makes runs drift apart, so the norms are left out)
check_bf16() {   # check_bf16 NAME REF OUT
  local l
  if l=$(compare_logs "$2" "$3" 2e-2 loss,val_loss 2>&1); then ok "$1: losses within $l"; else bad "$1: $l"; fi
}
check_bf16 "bf16 emulated gpu, 20 steps, within 2 % of fp32 cpu (capacity factor 1)" "$TED_TMP/cpu20.jsonl" "$TED_TMP/b20.jsonl"
if grep -q "GEMMs (0 on fp32 operands)" "$TED_TMP/b20.out"; then ok "bf16 run: every GEMM on bf16 operands ($(grep -o "[0-9]* GEMMs" "$TED_TMP/b20.out"))"
else bad "bf16 run: GEMMs on fp32 operands: $(grep "^emu:" "$TED_TMP/b20.out")"; fi
check_bf16 "bf16 emulated gpu, dropless, within 2 % of fp32 cpu" "$TED_TMP/cpu20-0.jsonl" "$TED_TMP/b20-0.jsonl"
check_bf16 "bf16 emulated gpu, a dense and an MoE block, within 2 % of fp32 cpu" "$TED_TMP/cpu20-dense.jsonl" \
  "$TED_TMP/b20-dense.jsonl"
check_bf16 "bf16 emulated gpu, activation checkpointing, within 2 % of fp32 cpu" "$TED_TMP/cpu20.jsonl" "$TED_TMP/b20-ac.jsonl"
for z in 1 2; do   # 2 ranks of dp (2 sequences each): the optimizer's shards and (2) buckets in fp32 gradients
  run b20-z$z "${MPIRUN[@]}" -np 2 "$TED_EMU" train "${bf[@]}" --micro-batch 2 --zero-stage $z
  check_bf16 "bf16 2 emulated ranks, ZeRO $z, within 2 % of fp32 cpu" "$TED_TMP/cpu20.jsonl" "$TED_TMP/b20-z$z.jsonl"
done
# AdamW beside the next forward on 2 ranks of tp 2 (each rank's shards whole): the same bits
run tp2 "${MPIRUN[@]}" -np 2 "$TED_EMU" train "${model[@]}" --device cuda --bf16 --tp 2
TED_OPT_OVERLAP=1 run tp2-overlap "${MPIRUN[@]}" -np 2 -x TED_OPT_OVERLAP -x TED_OPT_PART "$TED_EMU" train "${model[@]}" \
  --device cuda --bf16 --tp 2
check "bf16 2 emulated ranks (tp 2): AdamW beside the next forward = in one launch" "$TED_TMP/tp2.jsonl" \
  "$TED_TMP/tp2-overlap.jsonl" 0
ep2=("$TED_EMU" train "${model[@]}" --device cuda --bf16 --ep 2 --micro-batch 2 --steps 2 --eval-every 2)
run ep2 "${MPIRUN[@]}" -np 2 "${ep2[@]}"
TED_MOE_ROWS16=0 run ep2-rows32 "${MPIRUN[@]}" -np 2 -x TED_MOE_ROWS16 "${ep2[@]}"
check "bf16 2 emulated ranks (ep 2): expert rows exchanged in bf16 = fp32 and casts" "$TED_TMP/ep2.jsonl" \
  "$TED_TMP/ep2-rows32.jsonl" 0
run b20-4 "${MPIRUN[@]}" -np 4 "$TED_EMU" train "${bf[@]}" --micro-batch 2 --tp 2 --ep 2
check_bf16 "bf16 4 emulated ranks (tp 2, ep 2) within 2 % of fp32 cpu" "$TED_TMP/cpu20.jsonl" "$TED_TMP/b20-4.jsonl"
run b20-4opt "${MPIRUN[@]}" -np 4 "$TED_EMU" train "${bf[@]}" --micro-batch 2 --tp 2 --ep 2 --dtd --cac \
  --activation-checkpointing
check_bf16 "bf16 4 emulated ranks (tp 2, ep 2, --dtd --cac) within 2 % of fp32 cpu" "$TED_TMP/cpu20.jsonl" "$TED_TMP/b20-4opt.jsonl"
summary
