#!/usr/bin/env bash
# test_mpi_sparse.sh — block-sparse attention in training (design), MoE E 4 top-2, T 128, block 16:
#  - `fixed` with a different global pattern per head (4 patterns, 4 heads) trained 10 steps on
#    (tp 2, ep 2; 4 ranks) equals one process within 1e-5 (losses, val_loss, final weights): each
#    TP rank's heads keep their global index; also with activation checkpointing and CAC;
#  - `bigbird` with per-head random blocks, the same on (tp 2, ep 2): the random blocks are the
#    same on every rank;
#  - resuming the one-process run at step 5 reproduces steps 6-10 exactly (the layouts come back);
#    a resume with another seed (other random blocks) is refused with one line, exit 2;
#  - bf16 and fp16 runs track the fp32 run (val_loss within 2%), bf16 with recompute too;
#  - `fixed` with `recompute` (no probabilities kept, the backward recomputes them) equals the
#    stored run bit for bit on one process, with fewer activation bytes, and on (tp 2, ep 2)
#    equals one process within 1e-5.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
cat >"$W/fixed.json" <<'JSON'
{"sparse_attention": {"mode": "fixed", "block": 16, "num_local_blocks": 4, "num_global_blocks": 1,
  "different_layout_per_head": true, "num_different_global_patterns": 4, "attention": "unidirectional"}}
JSON
cat >"$W/bigbird.json" <<'JSON'
{"sparse_attention": {"mode": "bigbird", "block": 16, "num_random_blocks": 2, "num_sliding_window_blocks": 3,
  "num_global_blocks": 1, "different_layout_per_head": true}}
JSON
/usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1])); c["sparse_attention"]["recompute"] = True
json.dump(c, open(sys.argv[2], "w"))' "$W/fixed.json" "$W/fixed-rc.json"
model=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 4 --n-positions 128
       --seq-len 128 --num-experts 4 --top-k 2 --moe-every 1 --min-capacity 1 --steps 10 --lr 1e-3 --warmup 2
       --eval-every 5 --eval-windows 8 --log-every 100)
model+=("${STATED_PEAK[@]}")   # no MFU is checked here (tests/mpi_env.sh)
single() {   # single NAME CONFIG ARGS...
  local n=$1 cfg=$2; shift 2
  OMP_NUM_THREADS=1 "$TED" train --config "$W/$cfg.json" "${model[@]}" --micro-batch 4 --log "$W/$n.jsonl" \
    --save "$W/$n" "$@" >"$W/$n.out" 2>&1
}
parallel() {   # parallel NAME CONFIG REF ARGS...: 4 ranks, tp 2, ep 2, against REF
  local n=$1 cfg=$2 ref=$3; shift 3
  if OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" train --config "$W/$cfg.json" "${model[@]}" --micro-batch 2 \
       --tp 2 --ep 2 --log "$W/$n.jsonl" --save "$W/$n" "$@" >"$W/$n.out" 2>&1 \
     && l=$(compare_logs "$W/$ref.jsonl" "$W/$n.jsonl" 1e-5) \
     && w=$(compare_weights "$W/$ref/step_00000010/model.safetensors" "$W/$n/step_00000010/model.safetensors" 1e-5); then
    ok "$n (tp 2, ep 2) = one process: losses $l, weights $w"
  else bad "$n (tp 2, ep 2) differs from one process"; tail -3 "$W/$n.out"; fi
}
single fixed fixed --save-every 5
parallel fixed-tp2-ep2 fixed fixed
parallel fixed-tp2-ep2-ckpt-cac fixed fixed --activation-checkpointing --cac
single bigbird bigbird
parallel bigbird-tp2-ep2 bigbird bigbird

# resume at step 5: steps 6-10 and the final weights exactly as the straight run
OMP_NUM_THREADS=1 "$TED" train --config "$W/fixed.json" "${model[@]}" --micro-batch 4 --resume "$W/fixed/step_00000005" \
  --log "$W/resumed.jsonl" --save "$W/resumed" >"$W/resumed.out" 2>&1
if /usr/bin/python3 - "$W/fixed.jsonl" "$W/resumed.jsonl" <<'PY' && cmp -s "$W/fixed/step_00000010/model.safetensors" "$W/resumed/step_00000010/model.safetensors"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
pick = lambda L: [(x["step"], x.get("loss"), x.get("val_loss")) for x in L if x.get("step", 0) > 5]
assert pick(a) == pick(b) and len(pick(b)) >= 6, (pick(a), pick(b))
PY
then ok "resume at step 5 reproduces steps 6-10 and the weights exactly"; else bad "resume differs"; fi
set +e
OMP_NUM_THREADS=1 "$TED" train --config "$W/fixed.json" "${model[@]}" --micro-batch 4 --resume "$W/fixed/step_00000005" \
  --seed 7 --save "$W/reseed" >"$W/reseed.out" 2>"$W/reseed.err"; rc=$?
set -e
if [ $rc -eq 2 ] && [ "$(wc -l <"$W/reseed.err")" -eq 1 ] && grep -q sparse_attention "$W/reseed.err"; then
  ok "resume with another seed refused: $(cat "$W/reseed.err")"; else bad "resume with another seed: rc $rc"; cat "$W/reseed.err"; fi

for prec in bf16 fp16 rc-bf16; do   # rc-bf16: recompute under bf16 (from the 16-bit stored q, k, v)
  if [ $prec = rc-bf16 ]; then single "fixed-$prec" fixed-rc --bf16; else single "fixed-$prec" fixed "--$prec"; fi
  if /usr/bin/python3 - "$W/fixed.jsonl" "$W/fixed-$prec.jsonl" <<'PY'
import json, sys
v = lambda p: [json.loads(l)["val_loss"] for l in open(p) if "val_loss" in l][-1]
a, b = v(sys.argv[1]), v(sys.argv[2])
print(f"val_loss fp32 {a:.4f}, 16-bit {b:.4f}")
assert abs(a - b) <= 0.02 * a
PY
  then ok "$prec tracks fp32"; else bad "$prec does not track fp32"; fi
done
single fixed-rc fixed-rc
if cmp -s "$W/fixed/step_00000010/model.safetensors" "$W/fixed-rc/step_00000010/model.safetensors" \
   && l=$(compare_logs "$W/fixed.jsonl" "$W/fixed-rc.jsonl" 0) \
   && act=$(/usr/bin/python3 - "$W/fixed.jsonl" "$W/fixed-rc.jsonl" <<'PY'
import json, sys
act = lambda p: next(r["mem"]["activations"] for r in map(json.loads, open(p)) if "mem" in r)
a, b = act(sys.argv[1]), act(sys.argv[2])
assert b < a, (a, b)
print(f"activations {a} -> {b} bytes")
PY
); then ok "recompute = stored probabilities bit for bit (losses $l, weights identical), $act"
else bad "recompute differs from stored probabilities"; tail -3 "$W/fixed-rc.out"; fi
parallel fixed-rc-tp2-ep2 fixed-rc fixed
summary
