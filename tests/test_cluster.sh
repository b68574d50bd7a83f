#!/usr/bin/env bash
# Multi-node runs over TCP on a namespace cluster (scripts/cluster.sh, docs/cluster.md; root only,
# else skipped with the reason). On 2 nodes x 2 ranks and on 4 x 2 (TED_CLUSTER_NODES, default "2 4"):
#  - tp 2 x ep 2, pp with one stage per node, dp with ZeRO stage 2 and 1-bit Adam (compression
#    "none") each give the one-process losses within 1e-5;
#  - the placement line ("groups across nodes") is what the README's mapping predicts (ranks fill
#    node1 first; rank = (stage*dp + dp_idx)*tp + tp_idx), and with --map-by node (TP pairs split
#    over nodes) it also warns;
#  - node2's link cut mid-run: the job ends non-zero within 60 s and a rank names the collective it
#    hung in; after the link is back, resuming from the last checkpoint gives the uncut run's losses;
#  - the same cut with --watchdog 3 (the watchdog fires before mpirun notices the lost node): the
#    job still ends within 60 s, with the watchdog's line.
source "${TED_ROOT:?}/tests/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (network namespaces)"; exit 77; }
export TED_CLUSTER_PREFIX=tedt$$
probe=${TED_CLUSTER_PREFIX}_probe
if ! ip netns add "$probe" 2>/dev/null; then echo "skipped: 'ip netns add' fails here"; exit 77; fi
ip netns del "$probe"
source tests/mpi_env.sh
C=scripts/cluster.sh
trap '$C down' EXIT
model=(--data data/moby-dick.txt --data-order sequential --n-layer 4 --n-embd 32 --n-head 8 --n-positions 32
       --seq-len 16 --grad-accum 2 --num-experts 4 --top-k 2 --moe-every 2 --min-capacity 1 --steps 10 --lr 3e-3
       --warmup 2 --eval-windows 4 --log-every 100)
model+=("${STATED_PEAK[@]}")   # no MFU is checked here (tests/mpi_env.sh)
GLOBAL=8
echo '{"zero_optimization": {"stage": 0}, "optimizer": {"type": "OneBitAdam",
       "params": {"freeze_step": 3, "compression": "none"}}}' > $W/onebit.json
one() { OMP_NUM_THREADS=1 "$TED" train "${model[@]}" --micro-batch $GLOBAL "$@" >/dev/null; }
# crun NAME NP [mpirun options] -- ted options: a run on the cluster, output in $W/NAME.out
crun() {
  local name=$1 np=$2; shift 2
  local mo=(); while [ "$1" != -- ]; do mo+=("$1"); shift; done; shift
  $C run $W/hosts "$np" "${mo[@]}" -x OMP_NUM_THREADS=1 "$TED" train "${model[@]}" "$@" --log $W/$name.jsonl \
    >$W/$name.out 2>&1
}
# expected placement line for NODES nodes, world NP, tp ep pp, ranks by slot (README) or round robin
placement() {
  /usr/bin/python3 - "$@" <<'PY'
import sys
nodes, np_, tp, ep, pp, rr = map(int, sys.argv[1:])
dp = np_ // (tp * pp); per = np_ // nodes
node = lambda r: r % nodes if rr else r // per
groups = {k: {} for k in ("tp", "ep", "edp", "dp", "pp")}
for st in range(pp):
    for di in range(dp):
        for ti in range(tp):
            r = (st * dp + di) * tp + ti; ei, edi = di % ep, di // ep
            for k, key in (("tp", (st, di)), ("ep", (st, ti, edi)), ("edp", (st, ti, ei)), ("dp", (st, ti)), ("pp", (di, ti))):
                groups[k].setdefault(key, set()).add(node(r))
parts = " ".join(f"{k} {sum(len(s) > 1 for s in g.values())}/{len(g)}" for k, g in groups.items())
print(f"placement: {np_} ranks on {nodes} nodes; groups across nodes: {parts}")
PY
}
check_placement() {   # NAME NODES NP TP EP PP RR
  local want; want=$(placement "${@:2}")
  if grep -qxF "$want" $W/$1.out; then ok "$1: $want"
  else bad "$1: placement: want '$want', got '$(grep '^placement' $W/$1.out || echo none)'"; fi
}
equal() {   # NAME REF: the run succeeded and its losses are the one-process run's within 1e-5
  local d
  if d=$(compare_logs $W/$2.jsonl $W/$1.jsonl 1e-5 2>&1); then ok "$1 = one process: within $d"
  else bad "$1: $(tail -2 $W/$1.out | tr '\n' ' ') $d"; fi
}

one --log $W/ref.jsonl
one --config $W/onebit.json --log $W/ref-onebit.jsonl
for n in ${TED_CLUSTER_NODES:-2 4}; do
  t0=$SECONDS
  $C up "$n" >/dev/null
  : > $W/hosts; for k in $(seq "$n"); do echo "node$k slots=2" >> $W/hosts; done
  np=$((2 * n))
  crun n$n-tp2ep2 $np -- --tp 2 --ep 2 --micro-batch $((GLOBAL * 2 / np)) || true
  equal n$n-tp2ep2 ref; check_placement n$n-tp2ep2 "$n" $np 2 2 1 0
  crun n$n-tp2ep2-rr $np --map-by node -- --tp 2 --ep 2 --micro-batch $((GLOBAL * 2 / np)) || true
  equal n$n-tp2ep2-rr ref; check_placement n$n-tp2ep2-rr "$n" $np 2 2 1 1
  if grep -q "^warning: [0-9]* TP group(s) span nodes" $W/n$n-tp2ep2-rr.out; then ok "n$n --map-by node: TP warning"
  else bad "n$n --map-by node: no TP warning"; fi
  crun n$n-pp$n $np -- --pp $n --micro-batch $((GLOBAL * n / np)) || true
  equal n$n-pp$n ref; check_placement n$n-pp$n "$n" $np 1 1 $n 0
  crun n$n-dp-zero2 $np -- --zero-stage 2 --micro-batch $((GLOBAL / np)) || true
  equal n$n-dp-zero2 ref; check_placement n$n-dp-zero2 "$n" $np 1 1 1 0
  crun n$n-onebit $np -- --config $W/onebit.json --micro-batch $((GLOBAL / np)) || true
  equal n$n-onebit ref-onebit
  $C down
  echo "     ($n nodes: $((SECONDS - t0)) s)"
done

# the link cut: dp 4, ZeRO 2, 40 steps, a checkpoint every 2; node2's link goes down after step 6's
t0=$SECONDS
$C up 2 >/dev/null
printf 'node1 slots=2\nnode2 slots=2\n' > $W/hosts
model+=(--steps 40 --zero-stage 2)
one --log $W/ref40.jsonl
crun uncut 4 -- --micro-batch 2 || true
equal uncut ref40
# cut NAME LINE [mpirun options] -- [ted options]: runs NAME on 2 nodes, cuts node2's link after step 6's
# checkpoint; the job must end within 60 s, non-zero, with a watchdog line matching LINE
cut() {
  local name=$1 want=$2; shift 2
  crun $name 4 "$@" --micro-batch 2 --save $W/ck-$name --save-every 2 &
  local job=$! rc=0 line took t
  for _ in $(seq 600); do [ -d $W/ck-$name/step_00000006 ] && break; sleep 0.1; done
  kill -0 $job 2>/dev/null || { bad "$name: ended before the cut"; tail -3 $W/$name.out; return; }
  $C link node2 down
  t=$(date +%s.%N)
  for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  took=$(echo "$(date +%s.%N) - $t" | bc)
  if kill -0 $job 2>/dev/null; then bad "$name: the job still runs ${took} s after the cut"; kill $job; return; fi
  wait $job || rc=$?
  line=$(grep -m1 "^ted: rank [0-9]*: watchdog: $want" $W/$name.out || true)
  if [ $rc -ne 0 ] && [ "$(echo "$took < 60" | bc)" = 1 ] && [ -n "$line" ]; then
    ok "$name: job ended (exit $rc) ${took} s after the cut: $line"
  else bad "$name: exit $rc after ${took} s, line '${line}'"; tail -5 $W/$name.out; fi
  $C link node2 up
}
# the default watchdog (600 s): mpirun's keepalive (configs/mpi_cluster.tune) ends the job; the ranks
# it stops name the collective they waited in
cut cut "stopped by a signal in [a-z_ ]* on group [a-z]* (" --
last=$(ls -d $W/ck-cut/step_* | tail -1)
crun resumed 4 -- --micro-batch 2 --resume $W/ck-cut || true
/usr/bin/python3 - $W/uncut.jsonl $W/resumed.jsonl $W/resumed.sliced.jsonl <<'PY'
import json, sys
res = [json.loads(l) for l in open(sys.argv[2])]
steps = {o["step"] for o in res if "step" in o}
with open(sys.argv[3], "w") as f:
    for l in open(sys.argv[1]):
        o = json.loads(l)
        if "run" in o or o.get("step") in steps: f.write(l)
PY
if d=$(compare_logs $W/resumed.sliced.jsonl $W/resumed.jsonl 0 2>&1); then
  ok "resumed from $(basename $last) after the link came back: steps $(grep -c '"loss"' $W/resumed.jsonl) = the uncut run (difference $d)"
else bad "resume after the cut: $d"; fi
# --watchdog 3, before mpirun can notice (its keepalive made slower here: (12, 17] s after the cut)
cut cut-watchdog3 "[a-z_ ]* on group [a-z]* (.*) not done after 3 s" --mca oob_tcp_keepalive_intvl 4 -- --watchdog 3
echo "     (link cuts and resume: $((SECONDS - t0)) s)"
summary
