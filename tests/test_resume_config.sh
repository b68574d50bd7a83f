#!/usr/bin/env bash
# test_resume_config.sh — resuming takes the model from the checkpoint; eval scores the
# validation split; DeepSpeed's train_batch_size (one process: dp 1).
# (a) a 4-step run saved; `--resume` with only --data and --steps 6 (no model keys) continues
#     from step 4 and logs steps 5-6 equal (exact text) to an unbroken 6-step run's.
# (b) --resume with a --config whose model section disagrees in n_embd and n_layer (and a flag
#     --n-head that disagrees) is refused: exit 2, one line naming all three keys.
# (c) --resume with a changed lr warns, naming lr with both values.
# (d) `ted eval --load CKPT --data FILE` (defaults: validation split, all windows) equals the
#     training log's val_loss at that step (the run evaluated all validation windows).
# (e) train_batch_size = micro_batch x grad_accum runs; another value is refused with the numbers.
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
head -c 20000 data/moby-dick.txt >"$W/small.txt"   # 2000 validation bytes: 125 windows of 16+1
MODEL=(--n-layer 2 --n-embd 32 --n-head 4 --n-positions 16 --micro-batch 4 --num-experts 4 --top-k 2
       --moe-every 2 --warmup 2 --threads 1)

"$TED" train "${MODEL[@]}" --data "$W/small.txt" --steps 6 --log "$W/full.jsonl" >"$W/full.out" 2>&1 || fail "full run"
"$TED" train "${MODEL[@]}" --data "$W/small.txt" --steps 6 --save-every 4 --save "$W/ck" --log "$W/a.jsonl" \
  >"$W/a.out" 2>&1 || fail "first run"
# (a)
"$TED" train --data "$W/small.txt" --steps 6 --micro-batch 4 --warmup 2 --threads 1 --resume "$W/ck/step_00000004" --log "$W/b.jsonl" \
  >"$W/b.out" 2>"$W/b.err" || { cat "$W/b.err"; fail "(a) resume without the model keys"; }
grep -q "^resumed from $W/ck/step_00000004 at step 4 (" "$W/b.out" || fail "(a) no 'resumed ... at step 4' line"
grep -q '^  checkpoint: .*n-embd 32' "$W/b.out" || sed -n '/^  checkpoint:/,/^  defaults:/p' "$W/b.out" | grep -q 'n-embd 32' ||
  fail "(a) the model keys are not shown as from the checkpoint"
/usr/bin/python3 - "$W/full.jsonl" "$W/b.jsonl" <<'PY' || fail "(a) resumed steps differ from the unbroken run"
import json, sys
rows = lambda p: {o["step"]: o for o in (json.loads(l, parse_float=str) for l in open(p)) if "loss" in o}
full, res = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(res) == [5, 6], sorted(res)
for s in res:
    for k in ("loss", "lm_loss", "aux_loss", "grad_norm", "lr"):
        assert res[s][k] == full[s][k], (s, k, res[s][k], full[s][k])
PY
echo "ok   (a) --resume without model keys continues exactly"
# (b)
cat >"$W/other.json" <<'JSON'
{"model": {"n_embd": 64, "n_layer": 3, "vocab_size": 256}, "train_micro_batch_size_per_gpu": 4}
JSON
before=$(find "$W/ck" -printf "%p %s %T@\n" | sort)
rc=0
"$TED" train --config "$W/other.json" --n-head 2 --data "$W/small.txt" --steps 6 --resume "$W/ck" >"$W/c.out" 2>"$W/c.err" || rc=$?
[ $rc -eq 2 ] || fail "(b) exit $rc, expected 2"
[ "$(wc -l <"$W/c.err")" -eq 1 ] || { cat "$W/c.err"; fail "(b) not one line"; }
for k in "n_embd 64 (--config) vs 32" "n_layer 3 (--config) vs 2" "n_head 2 (flag) vs 4"; do
  grep -qF "$k" "$W/c.err" || { cat "$W/c.err"; fail "(b) the line does not name: $k"; }
done
grep -q "vocab_size" "$W/c.err" && fail "(b) names vocab_size, which agrees"
[ "$(find "$W/ck" -printf "%p %s %T@\n" | sort)" = "$before" ] || fail "(b) a refused run changed the checkpoint folder"
echo "ok   (b) a disagreeing --config is refused naming every differing key: $(cat "$W/c.err")"
# (c)
"$TED" train --data "$W/small.txt" --steps 6 --micro-batch 4 --warmup 2 --threads 1 --lr 0.001 --resume "$W/ck/step_00000004" --save "$W/ck_lr" \
  >"$W/d.out" 2>&1 || fail "(c) resume with another lr"
grep -q '^warning: resuming with training keys that differ .*lr 0.0006 -> 0.001' "$W/d.out" || fail "(c) no warning naming lr"
echo "ok   (c) $(grep '^warning: resuming' "$W/d.out")"
# (d)
ev=$("$TED" eval --load "$W/ck/step_00000006" --data "$W/small.txt" 2>"$W/e.err") || { cat "$W/e.err"; fail "(d) eval"; }
grep -q "^loaded $W/ck/step_00000006 (step 6)" "$W/e.err" || fail "(d) eval does not say which step it loaded"
/usr/bin/python3 - "$W/a.jsonl" "$ev" <<'PY' || fail "(d) eval differs from the log's val_loss"
import json, sys
val = [o for o in map(json.loads, open(sys.argv[1])) if "val_loss" in o and o["step"] == 6][0]
e = json.loads(sys.argv[2])
assert e["split"] == "val" and e["windows"] == val["val_windows"] == 124, (e, val)
rel = abs(e["loss"] - val["val_loss"]) / val["val_loss"]
assert rel < 1e-6, (e["loss"], val["val_loss"])
print(f"ok   (d) ted eval {e['loss']:.7f} = log val_loss {val['val_loss']:.7f} over {e['windows']} windows")
PY
# (e)
cat >"$W/tbs.json" <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
JSON
"$TED" train --config "$W/tbs.json" --data "$W/small.txt" --n-layer 1 --n-embd 16 --n-head 2 --n-positions 16 --steps 1 \
  --threads 1 >"$W/t.out" 2>&1 || { cat "$W/t.out"; fail "(e) a consistent train_batch_size refused"; }
rc=0
"$TED" train --config "$W/tbs.json" --grad-accum 3 --data "$W/small.txt" --n-layer 1 --n-embd 16 --n-head 2 --n-positions 16 \
  --steps 1 >"$W/t2.out" 2>"$W/t2.err" || rc=$?
[ $rc -eq 2 ] && grep -q "train_batch_size 8 does not equal micro_batch 4 x gradient_accumulation_steps 3 x dp 1 = 12" "$W/t2.err" ||
  { cat "$W/t2.err"; fail "(e) an inconsistent train_batch_size: exit $rc"; }
echo "ok   (e) train_batch_size accepted when consistent; refused: $(cat "$W/t2.err")"
