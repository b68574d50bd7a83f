#!/usr/bin/env bash
# ted against an independent PyTorch implementation of the same model (bench/torch_ref.py,
# float64): from the same initial checkpoint and sequential data, 12 training steps must give
# the same per-step losses and gradient norms, the same final weights, and `ted eval` the same
# loss as the reference's eval. Dense, MoE top-1 and top-2 with capacity drops, dropless.
source "${TED_ROOT:?}/tests/lib.sh"
: "${PYTHON:=/usr/bin/python3}"
DATA=data/moby-dick.txt
fails=0

# The reference's commands of every case go to one file that bench/torch_ref.py runs in one process
# (`batch`: one start of Python and torch instead of two per case); each case is checked after it.
BATCH=$TED_TMP/torch.batch
cases=()
run_case() {
  local name=$1; shift
  local dir=$TED_TMP/$name
  mkdir -p "$dir"
  local common=(--data "$DATA" --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32
                --seq-len 16 --micro-batch 4 --grad-accum 2 --lr 3e-3 --min-lr 3e-4 --warmup 3 --steps 12
                --weight-decay 0.1 --clip 1.0 --peak-tflops 1 "$@")   # a stated MFU peak: no sgemm timing per run (MFU is not checked)
  "$TED" train "${common[@]}" --steps 0 --save "$dir/init" >/dev/null
  "$TED" train "${common[@]}" --log "$dir/ted.jsonl" --save "$dir/ted" >/dev/null
  echo "train --init $dir/init/step_00000000 --data $DATA --steps 12 --micro-batch 4 --grad-accum 2 --lr 3e-3" \
       "--min-lr 3e-4 --warmup 3 --weight-decay 0.1 --clip 1.0 --out $dir/torch.json --save $dir/torch" >>"$BATCH"
  "$TED" eval --load "$dir/ted" --data "$DATA" --split all --windows 24 > "$dir/ted_eval.json"   # the whole file, as the reference
  echo "eval --init $dir/ted/step_00000012 --data $DATA --windows 24 --out $dir/torch_eval.json" >>"$BATCH"
  cases+=("$name")
}
check_case() {
  local name=$1 dir=$TED_TMP/$1
  if "$PYTHON" - "$dir" "$name" <<'PY'
import json, struct, sys
d, name = sys.argv[1], sys.argv[2]
ted = [json.loads(l) for l in open(f"{d}/ted.jsonl") if '"loss"' in l]
ref = json.load(open(f"{d}/torch.json"))
def series(r, k):
    return r[k] if isinstance(r, dict) and isinstance(r.get(k), list) else [x[k] for x in r]
def rel(a, b): return abs(a - b) / max(abs(b), 1e-12)
worst = {}
for k, tol in (("loss", 2e-5), ("lm_loss", 2e-5), ("aux_loss", 1e-3), ("grad_norm", 1e-3)):
    a = [x[k] for x in ted]; b = series(ref, k)
    assert len(a) == len(b) == 12, (k, len(a), len(b))
    worst[k] = max(rel(x, y) if k != "aux_loss" else abs(x - y) / max(abs(y), 1e-4) for x, y in zip(a, b))
    assert worst[k] < tol, f"{name}: {k} differs by {worst[k]:.2e} (tolerance {tol})"
def tensors(path):
    raw = open(path, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]; out[k] = struct.unpack(f"<{(e - b) // 4}f", raw[8 + n + b: 8 + n + e])
    return out
a = tensors(f"{d}/ted/step_00000012/model.safetensors")
b = tensors([f"{d}/torch/{p}" for p in ("model.safetensors",)][0])
assert a.keys() == b.keys(), set(a) ^ set(b)
wdiff = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a)
assert wdiff < 1e-4, f"{name}: final weights differ by {wdiff:.2e}"
te, re_ = json.load(open(f"{d}/ted_eval.json")), json.load(open(f"{d}/torch_eval.json"))
ediff = rel(te["loss"], re_["loss"])
assert ediff < 2e-5 and te["windows"] == re_["windows"] == 24, f"{name}: eval {te} vs {re_}"
print(f"{name:34s} loss {worst['loss']:.1e}  grad_norm {worst['grad_norm']:.1e}  aux {worst['aux_loss']:.1e}  "
      f"weights {wdiff:.1e}  eval {ediff:.1e}  ok")
PY
  then :; else fails=$((fails + 1)); echo "FAIL: $name"; fi
}

run_case dense --num-experts 1
run_case moe_top1_drops --num-experts 4 --top-k 1 --moe-every 1 --capacity-factor 0.5 --min-capacity 1 --aux-coef 0.05
run_case moe_top2_drops_z_group2 --num-experts 4 --top-k 2 --moe-every 2 --capacity-factor 0.75 --min-capacity 1 --group-size 2 --z-coef 0.01
run_case moe_top2_dropless --num-experts 4 --top-k 2 --moe-every 1 --capacity-factor 0
# a failing reference command is named on stderr; its case fails below (no torch.json / torch_eval.json)
"$PYTHON" bench/torch_ref.py batch "$BATCH" >/dev/null || echo "torch_ref batch: a command failed"
for name in "${cases[@]}"; do check_case "$name"; done
echo "$((4 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
