#!/usr/bin/env bash
# 1-bit Adam's update (docs/parallel.md) against an independent implementation of its exact form
# (bench/torch_ref.py --onebit-freeze, float64): one process, compression "none" (the group
# average of m is m itself), freeze_step 2 of 8 steps, so steps on both sides of the freeze. v̂ stays
# frozen at v/(1−β2^freeze_step); m keeps accumulating and m̂ = m/(1−β1^t) goes on with the step.
# Per-step losses and gradient norms, and the final weights, must match. Dense and MoE top-2. Clip 1.0
# binds on every step (asserted): the compressed steps are clipped as every step is (design §3; on one
# process the local gradient's norm is the global one); unclipped they were 1e-2 off at step 4.
source "${TED_ROOT:?}/tests/lib.sh"
: "${PYTHON:=/usr/bin/python3}"
DATA=data/moby-dick.txt
echo '{"zero_optimization": {"stage": 0}, "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 2, "compression": "none"}}}' \
  > "$TED_TMP/onebit.json"
fails=0
run_case() {
  local name=$1 clip=$2; shift 2
  local dir=$TED_TMP/$name
  mkdir -p "$dir"
  local common=(--data "$DATA" --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32
                --seq-len 16 --micro-batch 4 --grad-accum 2 --lr 3e-3 --min-lr 3e-4 --warmup 3 --steps 8
                --weight-decay 0.1 --clip "$clip" "$@")
  "$TED" train "${common[@]}" --steps 0 --save "$dir/init" >/dev/null
  "$TED" train "${common[@]}" --config "$TED_TMP/onebit.json" --log "$dir/ted.jsonl" --save "$dir/ted" >/dev/null
  "$PYTHON" bench/torch_ref.py train --init "$dir/init/step_00000000" --data "$DATA" --steps 8 --micro-batch 4 \
    --grad-accum 2 --lr 3e-3 --min-lr 3e-4 --warmup 3 --weight-decay 0.1 --clip "$clip" --onebit-freeze 2 \
    --out "$dir/torch.json" --save "$dir/torch" >/dev/null
  if "$PYTHON" - "$dir" "$name" "$clip" <<'PY'
import json, struct, sys
d, name, clip = sys.argv[1], sys.argv[2], float(sys.argv[3])
ted = [json.loads(l) for l in open(f"{d}/ted.jsonl") if '"loss"' in l]
ref = json.load(open(f"{d}/torch.json"))
rel = lambda a, b: abs(a - b) / max(abs(b), 1e-12)
worst = {}
for k, tol in (("loss", 1e-4), ("grad_norm", 1e-3)):   # the pre-fix form was 2e-2 off at step 4
    a, b = [x[k] for x in ted], ref[k]
    assert len(a) == len(b) == 8, (k, len(a), len(b))
    errs = [rel(x, y) for x, y in zip(a, b)]
    worst[k] = max(errs)
    bad = [i + 1 for i, e in enumerate(errs) if e >= tol]
    assert not bad, f"{name}: {k} differs from the exact form at steps {bad}: ted {a} vs reference {b}"
binds = [x["step"] for x in ted if x["grad_norm"] > clip]   # every compressed step (3..8) is clipped
assert all(s in binds for s in range(3, 9)), f"{name}: clipping does not bind after the freeze (steps {binds})"
def tensors(path):
    raw = open(path, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    return {k: struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f",
                             raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = tensors(f"{d}/ted/step_00000008/model.safetensors"), tensors(f"{d}/torch/model.safetensors")
i0 = tensors(f"{d}/init/step_00000000/model.safetensors")
assert a.keys() == b.keys(), set(a) ^ set(b)
# With v frozen after 2 steps the steps are large (weights move by up to ~1.5 in 8 steps), and fp32
# against float64 rounding, amplified where v is tiny, leaves ~1e-4 on a few elements: each tensor's
# largest difference is judged against how far the reference moved it (1e-3 of it, at least 1e-4).
wdiff = 0.0
for k in a:
    moved = max(abs(y - z) for y, z in zip(b[k], i0[k]))
    diff = max(abs(x - y) for x, y in zip(a[k], b[k]))
    wdiff = max(wdiff, diff / max(moved, 0.1))
assert wdiff < 1e-3, f"{name}: final weights differ from the exact form by {wdiff:.2e} of their movement"
print(f"ok   {name:20s} freeze_step 2 of 8 steps, clip {clip} (binds at steps {binds}): loss {worst['loss']:.1e}  grad_norm {worst['grad_norm']:.1e}  "
      f"weights {wdiff:.1e} of their movement  (losses {' '.join('%.4f' % x['loss'] for x in ted)})")
PY
  then :; else fails=$((fails + 1)); echo "FAIL: $name"; fi
}
run_case dense 1.0 --num-experts 1
run_case moe_top2 1.0 --num-experts 4 --top-k 2 --moe-every 2 --capacity-factor 0 --min-capacity 1
echo "$((2 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
