#!/usr/bin/env bash
# What the ranks exchange (issue 3, must-shows 3 and 4), from one step's JSONL line on rank 0 of
# (tp 2, ep 2) on 4 ranks with a dense and a MoE block:
#  - per MoE block and micro-step: 2 TP all-reduces and 2 EP all-to-alls forward, as many backward;
#  - calls and bytes equal the formulas of docs/parallel.md (Communication per rank);
#  - ZeRO-1: mem.optimizer = 12 bytes × this rank's shard of every tensor (within 1 %).
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
"${MPIRUN[@]}" -np 4 "$TED" train --data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 \
  --seq-len 16 --micro-batch 2 --grad-accum 3 --num-experts 4 --top-k 2 --moe-every 2 --capacity-factor 1.0 \
  --min-capacity 4 --steps 1 --tp 2 --ep 2 --log $TED_TMP/log.jsonl >/dev/null
/usr/bin/python3 - $TED_TMP/log.jsonl <<'PY'
import json, math, sys
s = next(o for o in map(json.loads, open(sys.argv[1])) if "step" in o)
c, mem = s["comm"], s["mem"]
G, tp, ep = 4, 2, 2; dp = G // tp; edp = dp // ep
V, Tmax, d, f, L, E, k, B, T, A = 256, 32, 32, 128, 2, 4, 2, 2, 16, 3
n_moe, n_dense = 1, 1
N = B * T                                        # tokens per rank and micro-step
C = max(4, math.ceil(1.0 * k * T / E)); Rs = E * B * C   # capacity slots: E experts × groups × C
checks = []
def want(name, key, value):
    got = c[name][key]
    checks.append(got == value)
    print(f"{'ok  ' if got == value else 'FAIL'} {name}.{key} = {got} (formula {value})")
# TP all-reduces per micro-step: embedding 1, attention out L, FFN out L, cross-entropy 3 (max, target, sum);
# backward: LM head 1, FFN input L, attention input L. A MoE block's FFN ones act on its Rr expert-side rows.
want("allreduce.tp", "calls", A * (1 + 2 * L + 3 + 1 + 2 * L))
want("allreduce.tp", "bytes", A * 4 * (N * d * (2 + 2 * L + 2 * n_dense) + 2 * n_moe * Rs * d + 3 * N))
# EP all-to-alls: 2 forward + 2 backward per MoE block, each the fixed E·C-slot buffer of d floats
want("alltoall.ep", "calls", A * 4 * n_moe)
want("alltoall.ep", "bytes", A * 4 * n_moe * Rs * d * 4)
# DP: one reduce-scatter and one all-gather per tensor and step over its group (size 1: nothing)
Vp = -(-V // (128 * tp)) * 128 * tp
dense = [Vp * d // tp, Tmax * d, d, d]                        # wte (vocab-parallel), wpe, ln_f w and b
for l in range(L):
    dense += [d, d, d * 3 * d // tp, 3 * d // tp, d * d // tp, d, d, d]   # ln_1, c_attn, c_proj, ln_2
    dense += [d * E] if (l + 1) % 2 == 0 else [d * f // tp, f // tp, f * d // tp, d]
dense_chunks = [-(-n // dp) for n in dense]
want("reduce_scatter.dp", "calls", len(dense))
want("reduce_scatter.dp", "bytes", 4 * sum(ch * dp for ch in dense_chunks))
want("allgather.dp", "bytes", 4 * sum(dense_chunks))
experts = [d * f // tp, f // tp, f * d // tp, d] * (E // ep)
want("reduce_scatter.edp", "calls", 0 if edp == 1 else len(experts))
# ZeRO-1: fp32 master + m + v of rank 0's shard (the first chunk of each tensor over its DP group)
shard = sum(dense_chunks) + sum(-(-n // edp) for n in experts)
rel = abs(mem["optimizer"] - 12 * shard) / (12 * shard)
checks.append(rel <= 0.01)
print(f"{'ok  ' if rel <= 0.01 else 'FAIL'} mem.optimizer = {mem['optimizer']} bytes, 12 x shard {shard} = {12 * shard} ({rel:.2%})")
print(f"{sum(checks)} passed, {len(checks) - sum(checks)} failed")
sys.exit(0 if all(checks) else 1)
PY
