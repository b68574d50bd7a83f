#!/usr/bin/env bash
# model.arch llama over MPI equals one process (docs/llama.md): a small Mixtral-style model (RMSNorm,
# rotary, 4 query heads on 2 kv heads, SwiGLU experts in Mixtral's layout, Mixtral's router, untied
# head), 8 fp32 steps, sequential data. Each layout — tp × ep × dp, ZeRO 0/2, the pipeline (1f1b,
# interleaved), DTD + CAC + checkpointing, shared experts, block-sparse attention — gives per-step
# losses and final weights within 1e-5 of its one-process run; bf16 on 4 ranks tracks one bf16
# process within 1e-2. A dense llama (tied head) checks tp and pp. Qwen2-MoE's block (q/k/v biases, a
# shared expert scaled by its sigmoid gate, MoE every other block) checks tp × ep with DTD, CAC and
# checkpointing, bf16 (16-bit activation storage) over tp, and pp × dp with ZeRO 1 and unrenormalised
# gates (topk_renorm false). An fp32 layout that parts from one process passes only at a near tie of
# the routing (near_tie in tests/mpi_env.sh: capacity drops turn a choice that rounding routes the
# other way into a parting, with nothing wrong). Adam eps is 1e-6 in the MoE configs (as in
# test_mpi_routing): weight gradients near 0 (~1e-8, sums of terms that cancel) carry round-off
# comparable to eps 1e-8, and lr·g/(|g|+eps) turned it into 1.09e-5 of qwen-tp2-ep2-dtd-cac-ckpt's
# layer-2 up_proj at losses equal to 7e-9 and per-tensor gradient norms within 1.4e-6 (with eps 1e-6:
# 2.9e-7). The tolerance stays 1e-5.
source "${TED_ROOT:?}/tests/lib.sh"
source tests/mpi_env.sh
GLOBAL=4
cat > "$TED_TMP/moe.json" <<'JSON'
{"model": {"arch": "llama", "n_kv_head": 2, "tie_word_embeddings": false, "rope_theta": 500},
 "moe": {"router": "mixtral", "expert_type": "swiglu"}, "optimizer": {"params": {"eps": 1e-6}}}
JSON
cat > "$TED_TMP/moe_sparse.json" <<'JSON'
{"model": {"arch": "llama", "n_kv_head": 2, "tie_word_embeddings": false, "rope_theta": 500},
 "moe": {"router": "mixtral", "expert_type": "swiglu", "shared_experts": 1},
 "sparse_attention": {"mode": "fixed", "block": 4, "num_local_blocks": 2, "num_global_blocks": 1},
 "optimizer": {"params": {"eps": 1e-6}}}
JSON
cat > "$TED_TMP/qwen.json" <<'JSON'
{"model": {"arch": "llama", "n_kv_head": 2, "tie_word_embeddings": false, "rope_theta": 500, "qkv_bias": true},
 "moe": {"router": "mixtral", "expert_type": "swiglu", "shared_experts": 2, "shared_expert_gate": true},
 "optimizer": {"params": {"eps": 1e-6}}}
JSON
moe=(--config "$TED_TMP/moe.json" --data data/moby-dick.txt --data-order sequential --n-layer 4 --n-embd 32 --n-head 4
     --n-positions 32 --seq-len 16 --grad-accum 2 --num-experts 4 --top-k 2 --moe-every 1 --min-capacity 1
     --capacity-factor 1.0 --expert-inner 48 --steps 8 --lr 3e-3 --warmup 2 --eval-every 8 --eval-windows 8 --log-every 100)
moe+=("${STATED_PEAK[@]}")   # no MFU is checked here (tests/mpi_env.sh)
dense=(--data data/moby-dick.txt --data-order sequential --arch llama --n-kv-head 2 --n-layer 4 --n-embd 32 --n-head 4
       --n-positions 32 --seq-len 16 --grad-accum 2 --steps 8 --lr 3e-3 --warmup 2 --eval-every 8 --eval-windows 8
       --log-every 100)
dense+=("${STATED_PEAK[@]}")
# case NAME TOL NP DP (model flags…) -- (layout flags…): the layout on NP ranks against one process
run_case() {
  local name=$1 tol=$2 np=$3 dp=$4; shift 4
  local base=() lay=() seen=0
  for a in "$@"; do if [ "$a" = -- ]; then seen=1; elif [ $seen = 0 ]; then base+=("$a"); else lay+=("$a"); fi; done
  local ref=$TED_TMP/$name-single out=$TED_TMP/$name
  OMP_NUM_THREADS=1 "$TED" train "${base[@]}" --micro-batch $GLOBAL --log $ref.jsonl --save $ref >/dev/null
  local why=
  if ! "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 "$TED" train "${base[@]}" "${lay[@]}" --micro-batch $((GLOBAL / dp)) \
       --log "$out.jsonl" --save "$out" >"$out.out" 2>&1; then
    echo "FAIL $name: the run"; tail -3 "$out.out"; fail=$((fail + 1))
  elif l=$(compare_logs "$ref.jsonl" "$out.jsonl" "$tol" 2>/dev/null) \
     && w=$(compare_weights "$ref/step_00000008/model.safetensors" "$out/step_00000008/model.safetensors" "$tol" 2>/dev/null); then
    echo "ok   $name: losses $l, weights $w"; pass=$((pass + 1))
  elif [ "$tol" = 1e-5 ] && why=$(OMP_NUM_THREADS=1 near_tie "$out" "$np" "${base[@]}" --micro-batch $GLOBAL -- "${base[@]}" \
                                  "${lay[@]}" --micro-batch $((GLOBAL / dp))); then
    echo "ok   $name: parts from one process at a near tie: $why"; pass=$((pass + 1))
  else
    echo "FAIL $name${why:+: parts from one process, and not at a near tie: $why}"; fail=$((fail + 1))
  fi
}
run_case moe-ep2-zero2 1e-5 2 2 "${moe[@]}" --zero-stage 2 -- --ep 2
run_case moe-tp2-ep2-zero0-dtd-cac 1e-5 4 2 "${moe[@]}" --zero-stage 0 --activation-checkpointing -- --tp 2 --ep 2 --dtd --cac
sparse=("${moe[@]}"); sparse[1]=$TED_TMP/moe_sparse.json
# dropless: its shared experts take Qwen2-MoE's names, hence other initial draws, and with capacity drops
# tp 2 then moved one rarely chosen expert's weights by 1.7e-5 at losses equal within 1e-8 (dropless: 3.6e-6)
run_case moe-tp2-shared-sparse 1e-5 2 1 "${sparse[@]}" --capacity-factor 0 -- --tp 2
# dropless here: with capacity drops, tp 2 alone moved one expert's weights by 9e-4 at equal losses and
# drop counts (a near-tie routing decision taken the other way after a TP sum in another order)
run_case moe-pp2-tp2-dropless 1e-5 4 1 "${moe[@]}" --capacity-factor 0 -- --pp 2 --tp 2
run_case moe-tp2-ep2-bf16 1e-2 4 2 "${moe[@]}" --bf16 -- --tp 2 --ep 2
run_case dense-tp2-pp2-interleaved 1e-5 4 1 "${dense[@]}" -- --tp 2 --pp 2 --pp-schedule interleaved --pp-virtual 2
qwen=("${moe[@]}"); qwen[1]=$TED_TMP/qwen.json
run_case qwen-tp2-ep2-dtd-cac-ckpt 1e-5 4 2 "${qwen[@]}" --moe-every 2 --capacity-factor 0 --activation-checkpointing -- \
  --tp 2 --ep 2 --dtd --cac
run_case qwen-tp2-bf16 1e-2 2 1 "${qwen[@]}" --capacity-factor 0 --bf16 -- --tp 2
run_case qwen-pp2-dp2-zero1-plain 1e-5 4 2 "${qwen[@]}" --capacity-factor 0 --zero-stage 1 --topk-renorm 0 -- --pp 2
summary
