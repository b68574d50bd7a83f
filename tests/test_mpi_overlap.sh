#!/usr/bin/env bash
# moe.overlap_degree (issue 22, docs/overlap.md): the expert-parallel exchange in N chunks overlapped
# with the experts. For N = 2 and 4, on tp x ep x dp layouts, ZeRO 0/1/2, pp, DTD, checkpointing, CAC
# (with and without DTD), bf16, capacity and dropless: per-step losses within 1e-6 of the same layout with
# N = 1 (OpenBLAS rounds a row of a GEMM differently with the rows in the call, and the weight
# gradients sum the chunks in another order) and within 1e-5 of one process. bf16: within 1e-4 of
# N = 1 (a last-bit fp32 change can move a stored bf16 activation by one of its 8-bit ulps; its aux
# loss 1e-3, the size of one choice routed the other way) and 2e-2 of the fp32 process, as the
# pipeline test. The all-to-all bytes do not change, the calls grow N-fold, and the log shows time
# in flight beside exposed time. Bad values are refused in one line.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
model=(--data data/moby-dick.txt --data-order sequential --n-layer 2 --n-embd 32 --n-head 8 --n-positions 32
       --seq-len 16 --grad-accum 2 --num-experts 8 --top-k 2 --moe-every 1 --min-capacity 1 --steps 6 --lr 3e-3
       --warmup 2 --eval-every 3 --eval-windows 16 --log-every 100)
model+=("${STATED_PEAK[@]}")   # no MFU is checked here (tests/mpi_env.sh)
for cf in 1.0 0; do
  OMP_NUM_THREADS=1 "$TED" train "${model[@]}" --capacity-factor $cf --micro-batch 8 --log $TED_TMP/single-$cf.jsonl >/dev/null
done
# name | ranks | dp | flags
cases=("tp2-ep2|4|2|--tp 2 --ep 2" "ep4|4|4|--ep 4" "ep2-zero0|4|4|--ep 2 --zero-stage 0"
       "ep2-zero2|4|4|--ep 2 --zero-stage 2" "pp2-ep2|4|2|--pp 2 --ep 2" "tp2-ep2-dtd|4|2|--tp 2 --ep 2 --dtd"
       "tp2-ep2-ckpt|4|2|--tp 2 --ep 2 --activation-checkpointing" "tp2-ep2-cac|4|2|--tp 2 --ep 2 --cac" "tp2-ep2-dtd-cac|4|2|--tp 2 --ep 2 --dtd --cac"
       "ep4-bf16|4|4|--ep 4 --bf16")
for cf in 1.0 0; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name np dp flags <<<"$c"
    [ $cf = 0 ] && [[ $name != tp2-ep2 && $name != ep4 && $name != tp2-ep2-dtd ]] && continue   # dropless: the plain and DTD exchanges
    one=1e-5; same=1e-6; aux=$same   # bf16 stores a 1-ulp fp32 change as 1 bf16 ulp, and such a change of a stored
    # activation moves router scores by far more than fp32 rounding: with capacity drops it routes a choice the
    # other way at margins of several 1e-6 (ep4-bf16 cf 1.0 N 4: aux_loss parts from N = 1 at step 4, where
    # N = 1's smallest margin is 6.8e-6), and one flipped choice moves the aux loss, which counts choices per
    # expert, by ~1e-4 (1.1e-4 at step 5 with the SIMD sums, losses within 2.3e-5): 1e-3 for bf16's aux loss
    [[ $name == *bf16* ]] && one=2e-2 same=1e-4 aux=1e-3
    for n in 1 2 4; do
      out=$TED_TMP/$name-cf$cf-n$n
      # shellcheck disable=SC2086
      if ! OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np $np "$TED" train "${model[@]}" --capacity-factor $cf \
             --micro-batch $((8 / dp)) $flags --overlap-degree $n --log $out.jsonl >$out.out 2>&1; then
        bad "$name cf $cf N $n: run failed"; tail -3 $out.out; continue
      fi
      l1=$(compare_logs $TED_TMP/single-$cf.jsonl $out.jsonl $one) || { bad "$name cf $cf N $n vs one process"; continue; }
      if [ $n = 1 ]; then ok "$name cf $cf N 1: one process within $l1"; continue; fi
      if ln=$(compare_logs $TED_TMP/$name-cf$cf-n1.jsonl $out.jsonl $same loss,lm_loss,val_loss) \
         && la=$(compare_logs $TED_TMP/$name-cf$cf-n1.jsonl $out.jsonl $aux aux_loss); then
        ok "$name cf $cf N $n: N = 1 within $ln (aux loss $la), one process within $l1"
      else bad "$name cf $cf N $n vs N = 1"; fi
    done
  done
done
# the progress thread (moe.progress_thread) only tests the requests: the losses of N = 4 without it, bit for bit
out=$TED_TMP/tp2-ep2-cf1.0-n4-thread
if OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --micro-batch 4 --tp 2 --ep 2 --overlap-degree 4 \
     --progress-thread --log $out.jsonl >$out.out 2>&1 \
   && compare_logs $TED_TMP/tp2-ep2-cf1.0-n4.jsonl $out.jsonl 0 >/dev/null; then ok "tp2-ep2 N 4 with the progress thread: bit for bit"
else bad "tp2-ep2 N 4 with the progress thread"; tail -3 $out.out; fi
# the all-to-all: same bytes, N times the calls, time in flight >= exposed time
if /usr/bin/python3 - $TED_TMP/ep4-cf1.0 <<'PY'
import json, sys
first = lambda n: next(o for o in map(json.loads, open(f"{sys.argv[1]}-n{n}.jsonl")) if "step" in o)["comm"]["alltoall.ep"]
a1, a4 = first(1), first(4)
assert a4["bytes"] == a1["bytes"], (a1, a4)
assert a4["calls"] == 4 * a1["calls"], (a1, a4)
assert a4["ms"] >= a4["exposed_ms"] and a1["ms"] == a1["exposed_ms"], (a1, a4)
print(f"bytes {a1['bytes']} both, calls {a1['calls']} -> {a4['calls']}, N 4 in flight {a4['ms']:.2f} ms, exposed {a4['exposed_ms']:.2f} ms")
PY
then ok "alltoall.ep counts"; else bad "alltoall.ep counts"; fi
# the TP steps: DTD's all-gathers and reduce-scatter go per chunk (the same bytes as N = 1, more calls,
# non-blocking collectives waited for at once: in flight = exposed up to the clock's reads); without DTD
# the expert outputs' TP sum stays one call per pass, on the token side (the same calls as N = 1, fewer
# bytes: the backward sums the N·d token gradient instead of the expert side's rows)
if /usr/bin/python3 - $TED_TMP <<'PY'
import json, sys
first = lambda name, n: next(o for o in map(json.loads, open(f"{sys.argv[1]}/{name}-cf1.0-n{n}.jsonl")) if "step" in o)["comm"]
a1, a4 = first("tp2-ep2", 1)["allreduce.tp"], first("tp2-ep2", 4)["allreduce.tp"]
assert a4["calls"] == a1["calls"] and a4["bytes"] < a1["bytes"], (a1, a4)
print(f"tp2-ep2 allreduce.tp: calls {a1['calls']} both, bytes {a1['bytes']} -> {a4['bytes']}")
for c in ("allgather.tp", "reduce_scatter.tp"):
    a1, a4 = first("tp2-ep2-dtd", 1)[c], first("tp2-ep2-dtd", 4)[c]
    assert a4["bytes"] == a1["bytes"] and a4["calls"] > a1["calls"], (c, a1, a4)
    assert a4["exposed_ms"] <= a4["ms"] + 1e-6, (c, a4)
    print(f"tp2-ep2-dtd {c}: bytes {a1['bytes']} both, calls {a1['calls']} -> {a4['calls']}")
PY
then ok "TP steps: one sum per pass, DTD per chunk"; else bad "TP steps"; fi
# resume: a checkpoint of an N = 2 run goes on under N = 4 (nothing saved depends on N)
R=$TED_TMP/resume
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --micro-batch 2 --ep 4 --overlap-degree 2 \
  --save-every 3 --save $R --log $R-a.jsonl >/dev/null 2>&1
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 4 "$TED" train "${model[@]}" --micro-batch 2 --ep 4 --overlap-degree 4 \
  --resume $R/step_00000003 --log $R-b.jsonl >/dev/null 2>&1
if d=$(/usr/bin/python3 - $R-a.jsonl $R-b.jsonl <<'PY'
import json, sys
rows = lambda p: {(o["step"], "val_loss" in o): o for o in map(json.loads, open(p)) if o.get("step", 0) > 3}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert a.keys() == b.keys() and len(b) >= 3, (sorted(a), sorted(b))
w = max(abs(a[k][f] - b[k][f]) / abs(a[k][f]) for k in a for f in ("loss", "val_loss") if f in a[k])
assert w <= 1e-6, w
print(f"{w:.1e}")
PY
); then ok "resume of N = 2 under N = 4: steps 4-6 within $d"; else bad "resume of N = 2 under N = 4"; fi
# refusals: one line of ted naming the key (mpiexec adds its own banner), non-zero exit
refuse() {   # refuse WHAT PATTERN ARGS...
  local what=$1 pat=$2; shift 2
  if out=$("$@" 2>&1); then bad "$what: accepted"; return; fi
  if [ "$(grep -c '^ted: ' <<<"$out")" -eq 1 ] && grep -q "^ted: .*$pat" <<<"$out"; then ok "$what refused: $(grep "$pat" <<<"$out" | head -1)"
  else bad "$what: $out"; fi
}
refuse "overlap_degree 0" "overlap_degree" "$TED" train "${model[@]}" --steps 1 --overlap-degree 0
refuse "overlap_degree 65" "overlap_degree" "$TED" train "${model[@]}" --steps 1 --overlap-degree 65
refuse "progress_thread without chunks" "progress_thread" "$TED" train "${model[@]}" --steps 1 --progress-thread
refuse "overlap_degree with --device cuda" "CPU only" "$TED" train "${model[@]}" --steps 1 --overlap-degree 2 --device cuda
# capacity: 16 tokens per group, 8 experts, top-2, factor 1 -> 4 rows per expert and group
refuse "overlap_degree 5 > capacity 4" "capacity rows (4)" "${MPIRUN[@]}" -np 2 "$TED" train "${model[@]}" --steps 1 \
  --micro-batch 4 --ep 2 --overlap-degree 5
summary
