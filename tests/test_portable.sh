#!/usr/bin/env bash
# test_portable.sh — the default build runs on any x86-64 node (CMakeLists.txt, core/simd.h):
#  - no instruction beyond x86-64-v2 (no AVX, AVX2, AVX-512, FMA, BMI) in any function of the binary
#    but the clones the loader picks by CPU (NAME.arch_x86_64_v3 / .arch_x86_64_v4) and the F16C
#    conversions, which run only after the CPU says it has them; and the hot loops have those clones
#    (GELU forward/backward, AdamW fp32/bf16/fp16)
#  - under qemu-x86_64 -cpu Nehalem (an x86-64-v2 CPU: the loader picks every default clone, glibc and
#    OpenBLAS their SSE paths) a run gives this machine's losses (fp32, bf16, fp16) within 1e-5
#    (qemu does not refuse the instructions a CPU lacks, so the first check is the proof of no SIGILL;
#    this one runs the default paths)
# A -DTED_NATIVE=ON build, or a CPU other than x86-64, exits 77 (skipped) with the reason.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks go on after a failed command
source tests/mpi_env.sh
[ "$(uname -m)" = x86_64 ] || { echo "SKIPPED: not an x86-64 machine"; exit 77; }
cache=$(dirname "$TED")/CMakeCache.txt
if grep -q '^TED_NATIVE:BOOL=ON' "$cache" 2>/dev/null; then echo "SKIPPED: a -DTED_NATIVE=ON build (-march=native)"; exit 77; fi

# every function's instructions beyond x86-64-v2: VEX/EVEX-coded (mnemonics v*), AVX-512 mask ops, BMI,
# LZCNT, MOVBE
objdump -d --no-show-raw-insn "$TED" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3); fns[fn] = 1; next }
  NF >= 2 && $1 ~ /:$/ {
    m = $2
    if (m ~ /^v/ || m ~ /^k(mov|and|or|xor|not|shift|test|add|unpck)/ ||
        m ~ /^(shlx|shrx|sarx|rorx|andn|bextr|blsi|blsr|blsmsk|bzhi|pdep|pext|mulx|lzcnt|tzcnt|movbe)$/) beyond[fn]++
  }
  END { for (f in fns) print (f in beyond ? beyond[f] : 0), f }' >"$W/isa.txt"
grep -vE ' .*\.arch_x86_64_v[34]$| fp16_(to|from)_f32_f16c(\..*)?$' "$W/isa.txt" | awk '$1 > 0' >"$W/outside.txt"
[ -s "$W/outside.txt" ] && bad "instructions beyond x86-64-v2 outside the dispatched clones: $(head -5 "$W/outside.txt" | tr '\n' ' ')" ||
  ok "no instruction beyond x86-64-v2 outside the dispatched clones ($(awk '$1 > 0' "$W/isa.txt" | wc -l) functions have some, all clones or the F16C conversions)"
missing=()
for f in gelu_forward gelu_backward gelu_bias_backward adamw_f32_host adamw_half_host adamw_fp16_host; do
  for v in v3 v4; do grep -q " $f.arch_x86_64_$v$" "$W/isa.txt" || missing+=("$f.$v"); done
done
[ ${#missing[@]} -eq 0 ] && ok "the hot loops have AVX2 and AVX-512 clones" || bad "no clone: ${missing[*]}"

# the default clones on an x86-64-v2 CPU (emulated) give this machine's losses
if ! command -v qemu-x86_64 >/dev/null; then
  bad "qemu-x86_64 is not installed (bash scripts/setup.sh installs qemu-user)"
else
  M=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --seq-len 16 --micro-batch 2
     --num-experts 4 --top-k 2 --log-every 0 --eval-windows 2 --threads 1 --peak-tflops 1 --steps 3)
  for p in fp32 bf16 fp16; do
    flag=(); [ $p = fp32 ] || flag=(--$p)
    OMP_NUM_THREADS=1 "$TED" train "${M[@]}" "${flag[@]}" --log "$W/host_$p.jsonl" >/dev/null 2>&1 &&
      OMP_NUM_THREADS=1 qemu-x86_64 -cpu Nehalem "$TED" train "${M[@]}" "${flag[@]}" --log "$W/v2_$p.jsonl" >/dev/null 2>"$W/v2.err" &&
      d=$(compare_logs "$W/host_$p.jsonl" "$W/v2_$p.jsonl" 1e-5 loss,lm_loss,grad_norm) &&
      ok "$p on an emulated x86-64-v2 CPU (Nehalem): this machine's losses within $d" ||
      { bad "$p on an emulated x86-64-v2 CPU"; tail -3 "$W/v2.err"; }
  done
fi
summary
