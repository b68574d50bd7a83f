#!/usr/bin/env bash
# ted tune (design §8.3): the performance model's traffic against ted's own log, its presets and
# its bad input.
#  - `ted tune --traffic` predicts, per collective and group, the calls and bytes one step sends on
#    rank 0; for six layouts of 4 ranks (TP × EP, EP with ZeRO-2, the pipeline, DTD, checkpointing
#    with and without CAC) it must equal the `comm` of the step ted logs: exact for the TP, EP and
#    pipeline traffic, within 2 % for ZeRO's (the model does not pad each tensor to the group size);
#  - every preset loads and the best layouts print, ranked, with an mpirun line; --json has the keys;
#  - a bad cluster file or option gives one line and exit 2.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
cat >"$TED_TMP/model.json" <<'JSON'
{"model": {"vocab_size": 256, "n_positions": 32, "n_embd": 32, "n_layer": 4, "n_head": 4, "n_inner": 128},
 "moe": {"num_experts": 4, "top_k": 2, "moe_every": 2, "capacity_factor": 1.0, "min_capacity": 4},
 "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "seq_len": 16}
JSON
layouts=("--tp 2 --ep 2" "--tp 1 --ep 4 --zero-stage 2" "--pp 2 --tp 1 --ep 2" "--tp 2 --ep 2 --dtd"
         "--tp 2 --ep 2 --activation-checkpointing" "--tp 2 --ep 2 --activation-checkpointing --cac"
         "--tp 2 --ep 2 --overlap-degree 2" "--tp 2 --ep 2 --dtd --overlap-degree 2")
# (STATED_PEAK on the runs below, tests/mpi_env.sh: nothing here reads MFU)
for lay in "${layouts[@]}"; do
  read -ra flags <<<"$lay"
  log=$TED_TMP/$(echo "$lay" | tr -d ' -').jsonl
  if ! "${MPIRUN[@]}" -np 4 "$TED" train --config "$TED_TMP/model.json" --data data/moby-dick.txt --steps 1 "${STATED_PEAK[@]}" \
       "${flags[@]}" --log "$log" >"$log.out" 2>&1; then
    bad "$lay: ted train"; tail -3 "$log.out"; continue
  fi
  "$TED" tune --config "$TED_TMP/model.json" --cluster namespace "${flags[@]}" --traffic >"$log.tune" 2>&1 ||
    { bad "$lay: ted tune --traffic"; cat "$log.tune"; continue; }
  if r=$(/usr/bin/python3 - "$log" "$log.tune" <<'PY'
import json, sys
step = next(o for o in map(json.loads, open(sys.argv[1])) if "step" in o)
got = {k: v for k, v in step["comm"].items() if "." in k and v["calls"] > 0}
want = json.load(open(sys.argv[2]))
bad = []
for key in sorted(set(got) | set(want)):
    g, w = got.get(key, {"calls": 0, "bytes": 0}), want.get(key, {"calls": 0, "bytes": 0})
    tol = 0.02 if key.endswith((".dp", ".edp")) else 0.0
    if g["calls"] != w["calls"] or abs(g["bytes"] - w["bytes"]) > tol * max(g["bytes"], 1):
        bad.append(f"{key}: logged {g['calls']} calls {g['bytes']} bytes, predicted {w['calls']} calls {w['bytes']} bytes")
print("; ".join(bad) if bad else f"{len(got)} collectives equal")
sys.exit(1 if bad else 0)
PY
  ); then ok "$lay: predicted traffic = the log's: $r"; else bad "$lay: $r"; fi
done

# pipeline.layers "auto": 8 blocks (MoE every other), pp 4, an LM head as costly as a block: the
# split gives the last stage one block, and the run equals one process
sed 's/"n_layer": 4/"n_layer": 8/; s/"vocab_size": 256/"vocab_size": 1024/' "$TED_TMP/model.json" |
  sed 's/"seq_len": 16}/"seq_len": 16, "pipeline": {"layers": "auto"}}/' >"$TED_TMP/auto.json"
OMP_NUM_THREADS=1 "$TED" train --config "$TED_TMP/auto.json" --data data/moby-dick.txt --steps 3 --micro-batch 2 "${STATED_PEAK[@]}" \
  --grad-accum 4 --log "$TED_TMP/auto1.jsonl" >"$TED_TMP/auto1.out" 2>&1 || bad "auto: one process"
"${MPIRUN[@]}" -np 4 "$TED" train --config "$TED_TMP/auto.json" --data data/moby-dick.txt --steps 3 --micro-batch 2 "${STATED_PEAK[@]}" \
  --grad-accum 4 --pp 4 --log "$TED_TMP/auto4.jsonl" >"$TED_TMP/auto4.out" 2>&1 || bad "auto: pp 4"
if grep -q "^pipeline.layers auto: \[2, 2, 3, 1\] blocks per chunk" "$TED_TMP/auto4.out" &&
   l=$(compare_logs "$TED_TMP/auto1.jsonl" "$TED_TMP/auto4.jsonl" 1e-5); then
  ok "pipeline.layers auto on pp 4: $(grep -o '\[2, 2, 3, 1\].*' "$TED_TMP/auto4.out"); losses = one process ($l)"
else bad "pipeline.layers auto"; grep -i "auto\|ted:" "$TED_TMP/auto4.out" | head -3; fi

# presets: each loads and ranks layouts; the best first, with its mpirun line
for preset in this-machine namespace dgx-a100 dgx-h100 summit; do
  g=4; [ "$preset" = this-machine ] && g=2   # its two cores
  out=$("$TED" tune --config configs/moby.json --cluster "$preset" --gpus $g 2>&1) && rc=0 || rc=$?
  if [ $rc -eq 0 ] && grep -q "^1 " <<<"$out" && grep -q "^best: mpirun -np $g " <<<"$out" &&
     /usr/bin/python3 -c "import sys; t=[float(l.split()[11]) for l in sys.stdin if l[:1].isdigit()]; sys.exit(t != sorted(t) or not t)" <<<"$out"; then
    ok "preset $preset: $(grep '^1 ' <<<"$out" | tr -s ' ')"
  else bad "preset $preset: exit $rc"; echo "$out" | head -5; fi
done
n=$("$TED" tune --config configs/moby.json --cluster namespace --json | /usr/bin/python3 -c '
import json, sys
need = "pp tp ep dp zero_stage dtd cac micro_batch grad_accum step_ms mem_bytes".split()
rows = [json.loads(l) for l in sys.stdin]
assert rows and all(all(k in r for k in need) for r in rows)
print(len(rows))') && ok "--json: $n layouts, each with the keys" || bad "--json"

# --calibrate on 2 ranks of this machine: a cluster file of 1 node x 2 that tune then reads
if "${MPIRUN[@]}" -np 2 "$TED" tune --calibrate --out "$TED_TMP/cal.json" >"$TED_TMP/cal.out" 2>&1 &&
   grep -q '"nodes": 1, "devices_per_node": 2' "$TED_TMP/cal.json" &&
   "$TED" tune --config configs/moby.json --cluster "$TED_TMP/cal.json" | grep -q "^best: mpirun -np 2 "; then
  ok "--calibrate: $(cat "$TED_TMP/cal.out")"
else bad "--calibrate"; cat "$TED_TMP/cal.out"; fi
# 4 ranks of one thread on this machine's cores share them: shared_by is then measured (rank 0 alone
# against every rank at once) and held within [1, ranks x threads / cores] whatever the machine's load
# (no timing is asserted: any reading must come out inside that range); meet_us (a TP-like
# collective's wait for its peer between GEMMs) is written, >= 0
if OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 -x OMP_NUM_THREADS "$TED" tune --calibrate --out "$TED_TMP/cal4.json" >"$TED_TMP/cal4.out" 2>&1 &&
   s=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["device"]; assert d["meet_us"] >= 0; print(d["shared_by"])' "$TED_TMP/cal4.json") &&
   /usr/bin/python3 -c "import os,sys; s=$s; sys.exit(not (1 <= s <= max(1, 4 / os.cpu_count())))"; then
  ok "--calibrate on 4 ranks: shared_by $s"
else bad "--calibrate on 4 ranks: shared_by ${s:-?}"; cat "$TED_TMP/cal4.out"; fi
rc=0; "$TED" tune --calibrate --out "$TED_TMP/cal.json" >/dev/null 2>"$TED_TMP/cal.err" || rc=$?
[ $rc -eq 2 ] && grep -q "cal.json exists" "$TED_TMP/cal.err" && ok "--calibrate keeps an existing file: $(cat "$TED_TMP/cal.err")" ||
  bad "--calibrate over an existing file: exit $rc"

# a token bucket between nodes (inter.burst_kb): the EP all-to-all across nodes gets cheaper, the
# once-per-step ZeRO collectives (back to back, the bucket empty) cost the same
for b in 0 128; do
  /usr/bin/python3 - "$b" "$TED_TMP/bucket$b.json" <<'PY'
import json, sys
c = json.load(open("configs/clusters/namespace.json"))
c["inter"] = {"bandwidth_gbs": 0.00625, "latency_us": 30, "burst_kb": float(sys.argv[1])}
json.dump(c, open(sys.argv[2], "w"))
PY
  { "$TED" tune --config "$TED_TMP/model.json" --cluster "$TED_TMP/bucket$b.json" --gpus 4 --tp 2 --ep 2 --pp 1 \
      --zero-stage 1 --json 2>&1 | grep '"dtd": 0, "cac": 0, "activation_checkpointing": 0' |
      grep '"overlap_degree": 1, "overlap_comm": 0' | head -1 >"$TED_TMP/bucket$b.pred"; } || true
done
if r=$(/usr/bin/python3 - "$TED_TMP/bucket0.pred" "$TED_TMP/bucket128.pred" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["comm"]["alltoall.ep"] < a["comm"]["alltoall.ep"], (a["comm"], b["comm"])
for k in ("allgather.dp", "reduce_scatter.dp"):
    assert abs(a["comm"].get(k, 0) - b["comm"].get(k, 0)) < 1e-9, k
assert b["step_ms"] < a["step_ms"]
print(f"all-to-all {a['comm']['alltoall.ep']:.1f} -> {b['comm']['alltoall.ep']:.1f} ms, step {a['step_ms']:.0f} -> {b['step_ms']:.0f} ms")
PY
); then ok "inter.burst_kb: $r, ZeRO's unchanged"; else bad "inter.burst_kb: $r"; fi

# bad input: one line, exit 2
expect() {   # name, the line's text, args...
  local name=$1 text=$2; shift 2
  local rc=0 err
  err=$("$TED" tune "$@" 2>&1 >/dev/null) || rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -qF -- "$text" <<<"$err"; then ok "$name: $err"
  else bad "$name: exit $rc: $err"; fi
}
echo '{"name": "x", "nodes": 2, "devices_per_node": 4, "device": {"peak_tflops": 1, "gemm_efficiency": 1.5, "memory_gb": 8},
 "intra": {"bandwidth_gbs": 1, "latency_us": 1}, "inter": {"bandwidth_gbs": 1, "latency_us": 1}}' >"$TED_TMP/eff.json"
echo '{"name": "x", "nodes": 2, "devices_per_node": 4, "device": {"peak_tflops": 1, "gemm_efficiency": 0.5, "memory_gb": 8},
 "intra": {"bandwidth_gbs": 1, "latency_us": 1}, "inter": {"bandwidth_gbs": 1}, "colour": 1}' >"$TED_TMP/key.json"
expect "gemm_efficiency out of range" 'device.gemm_efficiency" must be a number in (0, 1]' --config configs/moby.json --cluster "$TED_TMP/eff.json"
expect "an unknown cluster key" 'unknown key "colour"' --config configs/moby.json --cluster "$TED_TMP/key.json"
sed 's/"burst_kb": 128.0/"burst_kb": -1/' "$TED_TMP/bucket128.json" >"$TED_TMP/neg.json"
expect "a negative burst" '"inter.burst_kb" must be a number in' --config configs/moby.json --cluster "$TED_TMP/neg.json"
expect "no such preset" "--cluster nowhere: cannot read" --config configs/moby.json --cluster nowhere
expect "more GPUs than the cluster" "exceeds the cluster's 4 devices" --config configs/moby.json --cluster namespace --gpus 8
expect "no layout matches" "no layout of 4 devices matches" --config configs/moby.json --cluster namespace --tp 3
expect "no --cluster" "needs --config FILE and --cluster NAME|FILE, or --calibrate" --config configs/moby.json
summary
