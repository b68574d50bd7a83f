#!/usr/bin/env bash
# test_deepspeed_keys.sh — a DeepSpeed config's keys do what DeepSpeed does (one process):
#  - scheduler types WarmupLR, WarmupDecayLR and WarmupCosineLR (warmup_type log and linear, their
#    parameters): the lr ted logs at every step equals DeepSpeed's formula (deepspeed/runtime/
#    lr_schedules.py, written out below from its definitions: the scheduler starts at iteration -1
#    and is stepped after each optimizer step) to 1e-6; a parameter of another type is refused
#  - fp16 loss scaling: a static loss_scale (128) stays; the dynamic scaler (initial_scale_power,
#    loss_scale_window, hysteresis, min_loss_scale) moves as DeepSpeed's DynamicLossScaler does fed with
#    the same overflow (skipped) steps
#  - steps_per_print sets the progress lines; wall_clock_breakdown prints the split
#  - every problem of a config in one line: unknown or refused keys (with "did you mean" where a
#    name is near), wrong types (a nested section's too), a key twice, steps_per_print and
#    log_every at odds
#  - keys of a switched-off feature get one warning line naming them, and --num-experts 1 switches
#    an MoE config to dense
#  - a DeepSpeed ZeRO-2 config with contiguous_gradients, reduce_scatter, allgather_partitions,
#    allgather_bucket_size, round_robin_gradients and offload_optimizer.pin_memory runs unedited,
#    one warning for each value ted does not do; optimizer.type "Adam" trains bit for bit as
#    "AdamW", and with adam_w_mode false as AdamW when weight_decay is 0, refused when it is not
#  - nonsense scheduler values refused in one line; a warm-up longer than the run gets a note
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
PY=/usr/bin/python3
BOOK=data/moby-dick.txt
M=(--data "$BOOK" --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --micro-batch 2 --eval-windows 2 --log-every 0)
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# --- schedulers: the logged lr against DeepSpeed's formulas
sched() {  # NAME STEPS JSON
  echo "{\"scheduler\": $3}" >"$W/$1.json"
  if ! "$TED" train "${M[@]}" --steps "$2" --lr 0.002 --config "$W/$1.json" --log "$W/$1.jsonl" >"$W/$1.out" 2>&1; then
    bad "scheduler $1: ted train failed"; tail -2 "$W/$1.out"; return; fi
  if r=$("$PY" - "$W/$1.json" "$W/$1.jsonl" <<'PY'
import json, math, sys
cfg = json.load(open(sys.argv[1]))["scheduler"]
p, kind, opt_lr = cfg["params"], cfg["type"], 0.002
got = [o["lr"] for o in map(json.loads, open(sys.argv[2])) if "lr" in o]
W = max(2, p.get("warmup_num_steps", 1000))
log_type = p.get("warmup_type", "log") == "log"
def gamma(i):   # DeepSpeed's warm-up gamma at iteration i < W
    return math.log(i + 1) / math.log(W) if log_type else i / W
def ds_lr(i):   # the value DeepSpeed's scheduler gives at last_batch_iteration i
    if kind == "WarmupCosineLR":
        if i < 0: return 0.0
        lo, cmin, T = p.get("warmup_min_ratio", 0.0), p.get("cos_min_ratio", 0.0001), p["total_num_steps"]
        if i < W: return opt_lr * (lo + gamma(i) * (1 - lo))
        prog = min(1.0, (i - W + 1) / max(1, T - W))
        return opt_lr * max(0.0, cmin + (1 - cmin) * (1 + math.cos(math.pi * prog)) / 2)
    lo = p.get("warmup_min_lr", 0.0)
    hi = p.get("warmup_max_lr", opt_lr if kind == "WarmupLR" else 0.001)
    if i < 0: return lo
    if i < W: g = gamma(i)
    elif kind == "WarmupDecayLR": g = max(0.0, (p["total_num_steps"] - i) / max(1.0, p["total_num_steps"] - W))
    else: g = 1.0
    return lo + (hi - lo) * g
want = [ds_lr(s - 1) for s in range(len(got))]   # ted's step s (0-based) runs at iteration s - 1
worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, want))
assert worst < 1e-6, [(s + 1, a, b) for s, (a, b) in enumerate(zip(got, want)) if abs(a - b) > 1e-6 * max(abs(b), 1e-12)][:4]
picks = [1, 2, W // 2, W, W + 1, len(got)]
print(f"{len(got)} steps within {worst:.1e}; lr at steps {picks}: " + ", ".join(f"{got[s - 1]:.4g}" for s in picks))
PY
  ); then ok "scheduler $1: $r"; else bad "scheduler $1: $r"; fi
}
sched warmuplr_log 24 '{"type": "WarmupLR", "params": {"warmup_min_lr": 0.0001, "warmup_max_lr": 0.001, "warmup_num_steps": 10}}'
sched warmuplr_linear 24 '{"type": "WarmupLR", "params": {"warmup_num_steps": 8, "warmup_type": "linear"}}'
sched warmupdecay 30 '{"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.003, "warmup_num_steps": 6, "total_num_steps": 24, "warmup_type": "linear"}}'
sched warmupcos_log 30 '{"type": "WarmupCosineLR", "params": {"warmup_num_steps": 5, "total_num_steps": 25, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05}}'
sched warmupcos_linear 24 '{"type": "WarmupCosineLR", "params": {"warmup_num_steps": 7, "total_num_steps": 20, "warmup_type": "linear"}}'

# refusals: one line, exit 2, naming the key
refuse() {  # NAME NEEDLE JSON [FLAGS...]
  local name=$1 needle=$2 json=$3; shift 3
  echo "$json" >"$W/$name.json"
  local rc=0
  "$TED" train "${M[@]}" --steps 2 --config "$W/$name.json" "$@" >"$W/$name.out" 2>"$W/$name.err" || rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$W/$name.err")" -eq 1 ] && grep -qF -- "$needle" "$W/$name.err"; then ok "$name: $(cat "$W/$name.err")"
  else bad "$name: rc $rc, $(cat "$W/$name.err")"; fi
}
refuse "cos_min_ratio under WarmupLR" "scheduler.params.cos_min_ratio is not a parameter of scheduler WarmupLR" \
  '{"scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}}}'
refuse "WarmupDecayLR without total_num_steps" "total_num_steps" '{"scheduler": {"type": "WarmupDecayLR", "params": {}}}'
refuse "warmup_type" '"log" or "linear"' '{"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cos"}}}'
refuse "min_loss_scale above the initial scale" "min_loss_scale" '{"fp16": {"enabled": true, "initial_scale_power": 2, "min_loss_scale": 8}}'
refuse "partition_activations true" "partition_activations\" true (ted cannot honour it" \
  '{"activation_checkpointing": {"enabled": true, "partition_activations": true}}'
# every problem of a file in one line, "did you mean" where a name is near
refuse "all unknown keys at once" '5 problems: unknown key "steps_per_prnt" (did you mean "steps_per_print"?); unknown key "fp16.loss_scal" (did you mean "fp16.loss_scale"?); "zero_optimization.offload_param" (ted cannot honour it' \
  '{"steps_per_prnt": 10, "fp16": {"enabled": false, "loss_scal": 0}, "zero_optimization": {"offload_param": {}, "contiguous_gradientz": true}, "loss_scale_window": 100}'
grep -qF 'unknown key "zero_optimization.contiguous_gradientz" (did you mean "zero_optimization.contiguous_gradients"?); unknown key "loss_scale_window" (did you mean "fp16.loss_scale_window"?)' \
  "$W/all unknown keys at once.err" && ok "...with the key of another section named" || bad "the list: $(cat "$W/all unknown keys at once.err")"
refuse "a type error with the unknown keys" '3 problems: key "gradient_accumulation_steps" must be an integer (got the string "2"); key "zero_optimization.reduce_scatter" must be true or false (got the string "true"); unknown key "zero_optimization.contiguous_gradient" (did you mean "zero_optimization.contiguous_gradients"?)' \
  '{"gradient_accumulation_steps": "2", "zero_optimization": {"reduce_scatter": "true", "contiguous_gradient": true}}'
refuse "a key twice in a nested object" 'key "optimizer.params.lr" appears twice in one object' \
  '{"optimizer": {"params": {"lr": 0.001, "betas": [0.9, 0.99], "lr": 0.002}}}'
refuse "steps_per_print and log_every at odds" '"steps_per_print" 10 and "log_every" 5 name one setting with two values (give one)' \
  '{"steps_per_print": 10, "log_every": 5}'
# nonsense scheduler values
refuse "gradient_clipping -1" "gradient_clipping (-1) must be >= 0 (0: no clipping)" '{"gradient_clipping": -1}'
refuse "cos_min_ratio 2" "scheduler.params.cos_min_ratio (2) must be in [0, 1]" \
  '{"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_num_steps": 2, "cos_min_ratio": 2}}}'
refuse "min_lr above lr" "scheduler.params.min_lr (0.01) is above the peak optimizer.params.lr (0.001)" \
  '{"optimizer": {"params": {"lr": 0.001}}, "scheduler": {"params": {"min_lr": 0.01}}}'
refuse "negative warm-up" "scheduler.params.warmup_num_steps (-5) must be >= 0" '{"scheduler": {"params": {"warmup_num_steps": -5}}}'
refuse "warmup_min_lr above warmup_max_lr" "scheduler.params.warmup_min_lr (0.01) is above the warm-up's peak warmup_max_lr (0.001)" \
  '{"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.01, "warmup_max_lr": 0.001}}}'
refuse "gradient_accumulation_steps 1e9" "gradient_accumulation_steps (1000000000) must be in [1, 65536]" \
  '{"gradient_accumulation_steps": 1e9}'
refuse "Adam with L2 weight decay" "optimizer.type Adam with optimizer.params.adam_w_mode false adds weight_decay (0.1)" \
  '{"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}}'
# a warm-up longer than the run: one note at start
echo '{}' >"$W/short.json"
"$TED" train "${M[@]}" --steps 3 --warmup 10 --config "$W/short.json" >"$W/short.out" 2>&1 &&
  grep -qx 'note: the warm-up (10 steps) is longer than the run (3 steps): the lr never reaches its peak (--warmup, scheduler.params.warmup_num_steps)' "$W/short.out" &&
  ok "a warm-up longer than the run: $(grep '^note: the warm-up' "$W/short.out")" || bad "no warm-up note: $(head -3 "$W/short.out")"

# --- a DeepSpeed ZeRO-2 config runs unedited; Adam is AdamW
ds() {  # NAME OPTIMIZER ZERO-EXTRA: a DeepSpeed config, 4 steps, its log
  cat >"$W/$1.json" <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 2, "gradient_clipping": 1.0,
 "optimizer": $2,
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.002, "warmup_num_steps": 2}},
 "zero_optimization": {"stage": 2, "overlap_comm": false, "reduce_bucket_size": 5e8, $3
   "offload_optimizer": {"device": "none", "pin_memory": true}}}
EOF
  "$TED" train "${M[@]}" --steps 4 --config "$W/$1.json" --log "$W/$1.jsonl" >"$W/$1.out" 2>&1
}
losses() { "$PY" -c "import json,sys; print(' '.join(repr(o['loss']) for o in map(json.loads, open(sys.argv[1])) if 'grad_norm' in o))" "$1"; }
if ds dsadam '{"type": "Adam", "params": {"lr": 0.002, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}}' \
     '"contiguous_gradients": true, "reduce_scatter": true, "allgather_partitions": true, "allgather_bucket_size": 5e8, "round_robin_gradients": false,' &&
   ds dsadamw '{"type": "AdamW", "params": {"lr": 0.002, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}}' ''; then
  a=$(losses "$W/dsadam.jsonl") b=$(losses "$W/dsadamw.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "optimizer.type Adam trains as AdamW, bit for bit: losses $a" || bad "Adam $a vs AdamW $b"
  w=$(grep -c '^warning: zero_optimization' "$W/dsadam.out")
  grep -qx 'warning: zero_optimization.allgather_bucket_size has no effect: ted gathers each parameter whole, in no buckets' "$W/dsadam.out" &&
    grep -qx "warning: zero_optimization.offload_optimizer.pin_memory true has no effect: ted's host buffers are ordinary (pageable) memory" "$W/dsadam.out" &&
    [ "$w" -eq 2 ] && ok "ZeRO keys ted does anyway accepted silently; $w warnings for the others" || bad "ZeRO warnings: $(grep '^warning' "$W/dsadam.out")"
else bad "a DeepSpeed ZeRO-2 config: $(grep 'ted:' "$W/dsadam.out" "$W/dsadamw.out")"; fi
if ds dsl2 '{"type": "Adam", "params": {"lr": 0.002, "weight_decay": 0, "adam_w_mode": false}}' '"contiguous_gradients": false,' &&
   ds dsw0 '{"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0}}' ''; then
  a=$(losses "$W/dsl2.jsonl") b=$(losses "$W/dsw0.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "Adam with adam_w_mode false and weight_decay 0 trains as AdamW" || bad "L2 with decay 0: $a vs $b"
  grep -qx 'warning: zero_optimization.contiguous_gradients false has no effect: ted keeps every gradient in one contiguous buffer anyway' "$W/dsl2.out" &&
    ok "contiguous_gradients false: one warning" || bad "contiguous_gradients false: $(grep '^warning' "$W/dsl2.out")"
else bad "Adam with adam_w_mode false, weight_decay 0: $(grep 'ted:' "$W/dsl2.out" "$W/dsw0.out")"; fi
# partition_activations false is what ted does: accepted
echo '{"activation_checkpointing": {"enabled": true, "partition_activations": false, "cpu_checkpointing": false}}' >"$W/pa.json"
"$TED" train "${M[@]}" --steps 1 --config "$W/pa.json" >/dev/null 2>&1 && ok "partition_activations false accepted" ||
  bad "partition_activations false refused"

# --- fp16 loss scaling
scale_run() {  # NAME FP16-JSON STEPS
  echo "{\"fp16\": $2}" >"$W/$1.json"
  "$TED" train "${M[@]}" --steps "$3" --lr 0.01 --config "$W/$1.json" --log "$W/$1.jsonl" >"$W/$1.out" 2>&1 ||
    { bad "fp16 $1: ted train failed"; tail -3 "$W/$1.out"; return 1; }
}
if scale_run static '{"enabled": true, "loss_scale": 128}' 6 &&
   "$PY" -c "import json,sys; s=[o['loss_scale'] for o in map(json.loads, open('$W/static.jsonl')) if 'loss_scale' in o]; sys.exit(not (s and set(s) == {128}))"
then ok "fp16 static loss_scale 128: every step at 128"; else bad "fp16 static loss_scale"; fi
dyn() {  # NAME FP16-JSON STEPS: the logged scales follow DynamicLossScaler fed with the logged overflows
  scale_run "$1" "$2" "$3" || return
  if r=$("$PY" - "$W/$1.json" "$W/$1.jsonl" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))["fp16"]
rows = [o for o in map(json.loads, open(sys.argv[2])) if "loss_scale" in o]
window, hyst = f.get("loss_scale_window", 1000), f.get("hysteresis", 2)
min_scale, consec = f.get("min_loss_scale", 1), f.get("consecutive_hysteresis", False)
scale, it, last, cur_h = 2.0 ** f.get("initial_scale_power", 16), 0, -1, hyst
for r in rows:   # DeepSpeed's update_scale after each step; ted logs the scale the next step uses
    if r["skipped"]:
        if hyst == 1 or cur_h == 1: scale = max(scale / 2, min_scale)
        else: cur_h -= 1
        last = it
    else:
        if consec: cur_h = hyst
        stable = it - last - 1
        if stable > 0 and stable % window == 0:
            if not consec: cur_h = hyst
            scale *= 2
    it += 1
    assert r["loss_scale"] == scale, (r["step"], r["loss_scale"], scale)
n = sum(r["skipped"] for r in rows)
print(f"{len(rows)} steps, {n} overflows, scales {[r['loss_scale'] for r in rows]}")
PY
  ); then ok "fp16 dynamic $1: $r"; else bad "fp16 dynamic $1: $r"; fi
}
dyn grow '{"enabled": true, "initial_scale_power": 3, "loss_scale_window": 3}' 10
dyn overflow '{"enabled": true, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 2}' 16
dyn min_scale '{"enabled": true, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1, "min_loss_scale": 131072}' 16
dyn consecutive '{"enabled": true, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 3, "consecutive_hysteresis": true}' 16
# the cases test something: overflows and growth both happen, and the floor holds
"$PY" - "$W" <<'PY' && ok "the dynamic cases saw overflows, growth after them, and the min_loss_scale floor" || bad "the dynamic cases test too little"
import json, sys
rows = lambda n: [o for o in map(json.loads, open(f"{sys.argv[1]}/{n}.jsonl")) if "loss_scale" in o]
for n in ("overflow", "min_scale", "consecutive"):
    r = rows(n)
    assert any(o["skipped"] for o in r) and any(b["loss_scale"] > a["loss_scale"] for a, b in zip(r, r[1:])), n
assert min(o["loss_scale"] for o in rows("min_scale")) == 131072
PY

# --- steps_per_print and wall_clock_breakdown
echo '{"steps_per_print": 3, "wall_clock_breakdown": true}' >"$W/print.json"
"$TED" train "${M[@]:0:12}" --steps 7 --config "$W/print.json" >"$W/print.out" 2>&1
steps=$(grep -o '^step *[0-9]*' "$W/print.out" | awk '{print $2}' | tr '\n' ' ')
walls=$(grep -c '^wall clock (mean of' "$W/print.out")
if [ "$steps" = "1 3 6 7 " ] && [ "$walls" -eq 5 ] && grep -q '^wall clock (mean of the run.s 7 steps)' "$W/print.out"; then
  ok "steps_per_print 3: progress at steps $steps; wall_clock_breakdown: $(grep -m1 '^wall clock' "$W/print.out")"
else bad "steps_per_print / wall_clock_breakdown: steps '$steps', $walls wall clock lines"; fi

[ "$fails" -eq 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
