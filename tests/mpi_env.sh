# Sourced by the MPI tests: how to launch ranks here (Open MPI on a small machine, maybe as root).
MPIRUN=(mpiexec --oversubscribe -x OMP_WAIT_POLICY=PASSIVE)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_MCA_rmaps_base_oversubscribe=1
# The log comparisons need only Python's standard library: /usr/bin/python3, else the python3 on
# PATH (a lent GPU machine may have no /usr/bin/python3).
PY3=/usr/bin/python3; [ -x "$PY3" ] || PY3=python3
# compare_logs A.jsonl B.jsonl TOL [KEYS]: per-step loss/lm_loss/aux_loss (and val_loss) equal
# within TOL relative; KEYS (comma-separated) narrows the comparison to those keys
compare_logs() {
  "$PY3" - "$@" <<'PY'
import json, sys
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
keys = sys.argv[4].split(",") if len(sys.argv) > 4 else ("loss", "lm_loss", "aux_loss", "val_loss")
la = [o for o in map(json.loads, open(a)) if "run" not in o]   # the first record is the run's settings
lb = [o for o in map(json.loads, open(b)) if "run" not in o]
assert len(la) == len(lb), f"{b}: {len(lb)} lines, {a} has {len(la)}"
worst = 0.0
for x, y in zip(la, lb):
    assert x["step"] == y["step"]
    for k in keys:
        if k in x:
            worst = max(worst, abs(x[k] - y[k]) / max(abs(x[k]), 1e-3))
assert worst <= tol, f"{b}: differs from {a} by {worst:.2e} (tolerance {tol})"
print(f"{worst:.1e}")
PY
}
# check NAME A B TOL: compare_logs A B TOL, printed as "ok"/"FAIL" and counted in the caller's pass/fail
check() {
  if d=$(compare_logs "$2" "$3" "$4"); then echo "ok   $1: within $d"; pass=$((pass + 1))
  else echo "FAIL $1"; fail=$((fail + 1)); fi
}
# compare_weights A.safetensors B.safetensors TOL: same tensors, max |a-b| <= TOL·max(1,|a|)
compare_weights() {
  "$PY3" - "$@" <<'PY'
import json, struct, sys
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]; out[k] = (v["shape"], struct.unpack(f"<{(e - s) // 4}f", raw[8 + n + s:8 + n + e]))
    return out
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), f"tensor names differ: {sorted(set(a) ^ set(b))[:5]}"
worst = 0.0
for k in a:
    assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
    worst = max(worst, max((abs(x - y) / max(1.0, abs(x)) for x, y in zip(a[k][1], b[k][1])), default=0))
assert worst <= tol, f"{sys.argv[2]}: weights differ by {worst:.2e} (tolerance {tol})"
print(f"{worst:.1e}")
PY
}
# near_tie OUT NP ONE_ARGS... -- LAYOUT_ARGS...: passes when a layout parts from one process only
# at a near tie of the routing. It runs the one process (ONE_ARGS, one thread) again with
# --log-tensors and the layout on NP ranks (LAYOUT_ARGS, the caller's OMP_NUM_THREADS), and
# `ted compare` must find the first parting at a step whose smallest routing margin is below 1e-6:
# two router scores so close that another GEMM shape's or sum order's rounding may route a token
# the other way, after which capacity drops and training take the runs apart. The layout logs its
# tensors too, except with --pp > 1 (each stage holds other tensors): there the margin is the one
# process's at the step where the losses part; until that step the runs agree to rounding, so it
# is the margin the layout met. A real bug (a wrong gradient) parts at a step with no near tie and
# fails. Prints compare's lines.
near_tie() {
  local out=$1 np=$2 one=() lay=() tl=(--log-tensors) i; shift 2
  while [ "$1" != -- ]; do one+=("$1"); shift; done; shift; lay=("$@")
  for ((i = 0; i + 1 < ${#lay[@]}; i++)); do
    if [ "${lay[i]}" = --pp ] && [ "${lay[i + 1]}" -gt 1 ]; then tl=(); fi
  done
  OMP_NUM_THREADS=1 "$TED" train "${one[@]}" --log-tensors --log "$out-one-t.jsonl" >"$out-one-t.out" 2>&1 \
    || { echo "one process with --log-tensors failed"; return 1; }
  "${MPIRUN[@]}" -np "$np" "$TED" train "${lay[@]}" "${tl[@]}" --log "$out-t.jsonl" >"$out-t.out" 2>&1 \
    || { echo "the layout again failed"; return 1; }
  near_tie_logs "$out-one-t.jsonl" "$out-t.jsonl"
}
# near_tie_logs ONE.jsonl OTHER.jsonl: the check of near_tie on two logs, the first a one-process
# run with --log-tensors (OTHER may hold only some of its steps, e.g. those after a resume)
near_tie_logs() {
  local c; c=$("$TED" compare "$1" "$2" --rtol 1e-5 --atol 1e-8) && { echo "compare finds no parting"; return 1; }
  echo "$c" | tr '\n' ' '
  grep -q "smallest routing margin: .*a near tie" <<<"$c"
}

# A stated MFU peak, for runs whose checks never read MFU: without one every `ted train` starts with
# rank 0 timing 18 sgemm of 1024^3 while the other ranks wait (about 1 s of a 4-rank run on 2 cores).
# test_progress, and every test that does not add this, still run the measured peak.
STATED_PEAK=(--peak-tflops 1)
