# Sourced by the MPI tests: how to launch ranks here (Open MPI on a small machine, maybe as root).
MPIRUN=(mpiexec --oversubscribe -x OMP_WAIT_POLICY=PASSIVE)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_MCA_rmaps_base_oversubscribe=1
# compare_logs A.jsonl B.jsonl TOL [KEYS]: per-step loss/lm_loss/aux_loss (and val_loss) equal
# within TOL relative; KEYS (comma-separated) narrows the comparison to those keys
compare_logs() {
  /usr/bin/python3 - "$@" <<'PY'
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
  /usr/bin/python3 - "$@" <<'PY'
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
