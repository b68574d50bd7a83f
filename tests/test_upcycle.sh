#!/usr/bin/env bash
# test_upcycle.sh — --init-from and ted upcycle (issue 27, docs/upcycle.md), on a small byte model:
#  - a GPT-2 folder as transformers saves it (transformers' config keys, n_inner null, dropout,
#    no ted keys; tensor names with or without "transformer.", attention-mask buffers, a tied
#    lm_head.weight) starts a run with the first-step loss of the ted folder it was made from
#  - the upcycled MoE's first-step lm_loss (train --init-from, and ted eval) equals the dense
#    checkpoint's within 1e-6, with granularity 1 (E 4, top-2) and 2 (E 8, top-1 x 2), also
#    upcycled from the transformers folder, and with router noisy_topk (top-1, granularity 1); then
#    its loss falls over 30 steps on Moby-Dick
#  - with bf16, --init-from's fp32 masters are the folder's weights exactly; under the CUDA emulation
#    (TED_EMU, where ted_emu is built) --device cuda gives the CPU's losses
#  - the same for llama: a transformers-style Llama folder starts a run with the ted folder's loss;
#    upcycled into Mixtral-layout experts (G 1, G 2, Mixtral's router at top-1) the first-step loss is the
#    dense one's; the upcycled folder saves as Mixtral and reads back without ted's keys
#  - a llama with q/k/v biases upcycles with them (the first-step loss is the dense one's)
#  - bad input: one line on stderr, a non-zero exit, no --save folder made, nothing overwritten; a model
#    past this node's memory (65536 experts) is refused before it is built
# Environment (from CTest): TED, TED_ROOT, TED_TMP (and TED_EMU where built).
source "${TED_ROOT:?}/tests/lib.sh"
PY=/usr/bin/python3
M=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --micro-batch 4 --eval-windows 2
   --log-every 0 --lr 3e-3 --warmup 0)
# MFU against a stated peak: otherwise every run starts with rank 0 timing 18 sgemm of 1024^3 while the
# other ranks wait (about 1 s of a 4-rank run on 2 cores); no check here reads MFU (the measured peak
# is test_progress's and every test's that does not give one)
M+=(--peak-tflops 1)
"$TED" train "${M[@]}" --steps 40 --save "$W/dense" >/dev/null 2>&1 || { echo "FAIL dense run"; exit 1; }
D=$W/dense/step_00000040

# a transformers-style GPT-2 folder from the ted one: GPT2LMHeadModel.save_pretrained's config.json
# keys (v4.39), the tensors under the base model's names (no "transformer."), GPT-2's attn.bias
# buffers and the tied lm_head.weight as older transformers wrote them
mkdir -p "$W/hf"
"$PY" - "$D" "$W/hf" <<'PY'
import json, sys, torch
sys.path.insert(0, "bench")
import torch_ref
src, out = sys.argv[1:]
c = json.load(open(f"{src}/config.json"))
cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
       "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
       "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": c["n_positions"], "n_embd": c["n_embd"],
       "n_head": c["n_head"], "n_inner": None, "n_layer": c["n_layer"], "n_positions": c["n_positions"],
       "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
       "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
       "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
       "torch_dtype": "float32", "transformers_version": "4.39.3", "use_cache": True, "vocab_size": c["vocab_size"]}
json.dump(cfg, open(f"{out}/config.json", "w"), indent=2)
P = torch_ref.st_read(f"{src}/model.safetensors")
T = {k[len("transformer."):]: v for k, v in P.items()}
n = c["n_positions"]
for l in range(c["n_layer"]):
    T[f"h.{l}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
T["lm_head.weight"] = P["transformer.wte.weight"]
torch_ref.st_write(f"{out}/model.safetensors", T)
PY

# lm_loss of step 1 (before any update) of a one-step run from folder $1
first() { rm -f "$W/first.jsonl"; "$TED" train "${M[@]}" --steps 1 --init-from "$1" --log "$W/first.jsonl" >/dev/null 2>&1 &&
          "$PY" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][1]["lm_loss"])' "$W/first.jsonl"; }
# |a - b| <= tol
near() { "$PY" -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(not abs(a - b) <= t)' "$@"; }
evl() { "$TED" eval --load "$1" --data data/moby-dick.txt --windows 8 2>/dev/null |
        "$PY" -c 'import json,sys; print(json.load(sys.stdin)["lm_loss"])'; }

l_dense=$(first "$D") || { echo "FAIL --init-from the ted folder"; exit 1; }
fresh=$("$TED" train "${M[@]}" --steps 1 --log "$W/fresh.jsonl" >/dev/null 2>&1 &&
        "$PY" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][1]["lm_loss"])' "$W/fresh.jsonl")
if near "$l_dense" "$fresh" 1; then bad "--init-from: step-1 lm_loss $l_dense is near a fresh model's ($fresh)"
else ok "--init-from the ted folder: step-1 lm_loss $l_dense (a fresh model's: $fresh)"; fi
l_hf=$(first "$W/hf") || l_hf=nan
[ "$l_hf" = "$l_dense" ] && ok "--init-from a transformers GPT-2 folder: the same step-1 lm_loss $l_hf" ||
  bad "transformers folder: $l_hf vs $l_dense"
e_dense=$(evl "$D")

# upcycle: name SOURCE E G [K [ROUTER]]; the MoE's first-step and eval lm_loss against the dense model's
up() {
  local name=$1 src=$2 e=$3 g=$4 k=${5:-0} router=${6:-topk} out
  out=$("$TED" upcycle --load "$src" --num-experts "$e" --granularity "$g" --top-k "$k" --router "$router" \
        --save "$W/$name" 2>&1) ||
    { bad "upcycle $name: $out"; return; }
  local l e1
  l=$(first "$W/$name") || l=nan
  e1=$(evl "$W/$name") || e1=nan
  if near "$l" "$l_dense" 1e-6 && near "$e1" "$e_dense" 1e-6; then
    ok "upcycle $name (E $e, G $g, router $router): step-1 lm_loss $l = dense $l_dense, eval lm_loss $e1 = dense $e_dense (1e-6)"
  else bad "upcycle $name: step-1 $l vs $l_dense, eval $e1 vs $e_dense"; fi
}
up g1 "$D" 4 1 2
up g2 "$W/dense" 8 2 1
up g2hf "$W/hf" 8 2 1
up noisy "$D" 4 1 1 noisy_topk   # its gate over the chosen scores is 1 for k = 1; the noise picks among equal copies
grep -q '"top_k":	2' "$W/g2/config.json" && grep -q '"expert_inner":	64' "$W/g2/config.json" &&
  grep -q '"capacity_factor":	0' "$W/g2/config.json" && ok "granularity 2: top_k 1 x 2, expert_inner 128 / 2, dropless" ||
  bad "g2 config: $(tr -d '\n' <"$W/g2/config.json")"

# the upcycled model trains: the loss falls over 30 steps
"$TED" train "${M[@]}" --steps 30 --init-from "$W/g1" --log "$W/train.jsonl" >/dev/null 2>&1 || bad "training g1"
"$PY" - "$W/train.jsonl" <<'PY' && ok "upcycled g1 trains: $(cat "$W/fall")" || bad "g1's loss does not fall: $(cat "$W/fall")"
import json, sys, os
L = [o["lm_loss"] for o in map(json.loads, open(sys.argv[1])) if "lm_loss" in o and "val_loss" not in o]
a, b = sum(L[:5]) / 5, sum(L[-5:]) / 5
open(os.path.join(os.path.dirname(sys.argv[1]), "fall"), "w").write(f"mean lm_loss of steps 1-5 {a:.4f}, of steps 26-30 {b:.4f}")
sys.exit(not (len(L) == 30 and b < a - 0.05))
PY

# bf16: the optimizer's fp32 masters are the folder's weights, not their bf16 roundings (lr 0: saved as read)
"$TED" train "${M[@]}" --steps 1 --bf16 --lr 0 --min-lr 0 --init-from "$W/g2" --save "$W/bf16" >/dev/null 2>&1 || bad "bf16 run"
"$PY" - "$W/g2/model.safetensors" "$W/bf16/step_00000001/model.safetensors" <<'PY' && ok "bf16 --init-from: fp32 masters exact" ||
import sys, torch
sys.path.insert(0, "bench")
import torch_ref
a, b = (torch_ref.st_read(p) for p in sys.argv[1:])
sys.exit(not (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)))
PY
  bad "bf16 --init-from: the saved masters differ from the folder's weights"

# --device cuda (under the CUDA emulation, where ted_emu is built): the same two steps as the CPU, 1e-5
if [ -n "${TED_EMU:-}" ] && [ -x "$TED_EMU" ]; then
  R=(--steps 2 --init-from "$W/g2")
  rm -f "$W/cpu.jsonl" "$W/emu.jsonl"
  "$TED" train "${M[@]}" "${R[@]}" --log "$W/cpu.jsonl" >/dev/null 2>&1 &&
    "$TED_EMU" train "${M[@]}" "${R[@]}" --device cuda --log "$W/emu.jsonl" >/dev/null 2>&1 &&
    source tests/mpi_env.sh && d=$(compare_logs "$W/cpu.jsonl" "$W/emu.jsonl" 1e-5 loss,lm_loss) &&
    ok "--init-from --device cuda (emulated) = the CPU run: within $d" || bad "--init-from --device cuda (emulated)"
else echo "note: ted_emu not built: --init-from --device cuda not checked here (tests/test_cuda_emu.sh's emulation)"; fi

# llama (docs/llama.md): a dense llama (2 kv heads), its transformers-style Llama folder (LlamaConfig's
# keys, no ted keys), upcycled into Mixtral-layout experts (granularity 1 and 2, and Mixtral's router at
# top-1); a Mixtral folder without ted's keys reads as transformers' MixtralForCausalLM runs it
g_dense=$l_dense g_eval=$e_dense
"$TED" train "${M[@]}" --arch llama --n-kv-head 2 --steps 40 --save "$W/ldense" >/dev/null 2>&1 || bad "llama dense run"
LD=$W/ldense/step_00000040
l_dense=$(first "$LD") || l_dense=nan
e_dense=$(evl "$LD") || e_dense=nan
# to_hf SRC OUT: SRC's tensors; config.json with transformers' keys only (v4.39's LlamaConfig/MixtralConfig)
to_hf() {
  mkdir -p "$2"; cp "$1/model.safetensors" "$2/"
  "$PY" - "$1/config.json" "$2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = c.get("ted", {})
moe = c.get("model_type") == "mixtral"
out = {"architectures": ["MixtralForCausalLM" if moe else "LlamaForCausalLM"], "model_type": c["model_type"],
       "hidden_size": c["hidden_size"], "intermediate_size": c["intermediate_size"],
       "num_hidden_layers": c["num_hidden_layers"], "num_attention_heads": c["num_attention_heads"],
       "num_key_value_heads": c["num_key_value_heads"], "max_position_embeddings": c["max_position_embeddings"],
       "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"], "tie_word_embeddings": c["tie_word_embeddings"],
       "vocab_size": c["vocab_size"], "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
       "pretraining_tp": 1, "rope_scaling": None, "torch_dtype": "float32", "transformers_version": "4.39.3"}
if moe:
    out.update({"num_local_experts": c["num_local_experts"], "num_experts_per_tok": c["num_experts_per_tok"],
                "router_aux_loss_coef": c["router_aux_loss_coef"], "output_router_logits": False, "sliding_window": None})
json.dump(out, open(sys.argv[2], "w"), indent=2)
PY
}
to_hf "$LD" "$W/lhf"
l_lhf=$(first "$W/lhf") || l_lhf=nan
[ "$l_lhf" = "$l_dense" ] && ok "--init-from a transformers Llama folder: the same step-1 lm_loss $l_lhf" ||
  bad "transformers Llama folder: $l_lhf vs $l_dense"
up lg1 "$LD" 4 1 2
up lg2 "$LD" 8 2 1
up lg2hf "$W/lhf" 8 2 1
up lmix "$LD" 4 1 1 mixtral   # Mixtral's gate is 1 at k = 1
grep -q '"model_type":	"mixtral"' "$W/lg1/config.json" && ok "an upcycled llama saves as MixtralForCausalLM" ||
  bad "lg1 config: $(tr -d '\n' <"$W/lg1/config.json" | head -c 300)"
to_hf "$W/lg1" "$W/mhf"
l_mhf=$(first "$W/mhf") || l_mhf=nan
near "$l_mhf" "$l_dense" 1e-6 && ok "--init-from a transformers Mixtral folder (dropless, Mixtral's router): step-1 lm_loss $l_mhf" ||
  bad "transformers Mixtral folder: $l_mhf vs $l_dense"
# q/k/v biases (Qwen2's attention, model.qkv_bias) come through upcycling: the MoE's first step is the
# dense model's; no Hugging Face class computes a Mixtral with them, so it saves as ted's own
"$TED" train "${M[@]}" --arch llama --n-kv-head 2 --qkv-bias --steps 40 --save "$W/lbias" >/dev/null 2>&1 ||
  bad "llama qkv_bias dense run"
LB=$W/lbias/step_00000040
l_dense=$(first "$LB") || l_dense=nan
e_dense=$(evl "$LB") || e_dense=nan
up lbias_up "$LB" 4 1 2
grep -q '"model_type":	"ted_moe"' "$W/lbias_up/config.json" && grep -q '"qkv_bias":	true' "$W/lbias_up/config.json" &&
  ok "an upcycled llama with q/k/v biases keeps them (qkv_bias true, model_type ted_moe)" ||
  bad "lbias_up config: $(tr -d '\n' <"$W/lbias_up/config.json" | head -c 300)"
l_dense=$g_dense e_dense=$g_eval

# bad input: one line naming the problem, a non-zero exit, no folder made, nothing overwritten
refuse() {   # name pattern command...
  local name=$1 pat=$2 rc=0
  shift 2
  rm -rf "$W/out"
  "$@" >/dev/null 2>"$W/err" || rc=$?
  # under mpiexec its own report of the exit follows: ted's line is the one "ted:" line
  local lines=$([ "$1" = mpiexec ] && grep -c '^ted:' "$W/err" || wc -l <"$W/err")
  if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -q -- "$pat" "$W/err" && [ ! -e "$W/out" ]; then
    ok "$name: $(grep '^ted:' "$W/err")"
  else bad "$name: rc $rc, $(cat "$W/err")"; fi
}
U=("$TED" upcycle --save "$W/out")
refuse "missing folder" "no-such: no such checkpoint" "${U[@]}" --load "$W/no-such" --num-experts 4
refuse "E not a multiple of G" "not a multiple of --granularity" "${U[@]}" --load "$D" --num-experts 6 --granularity 4
refuse "an MoE source" "already an MoE" "${U[@]}" --load "$W/g1" --num-experts 8
refuse "top-1 without granularity" "top-1" "${U[@]}" --load "$D" --num-experts 4 --top-k 1
refuse "router switch" "switch" "${U[@]}" --load "$D" --num-experts 4 --router switch
refuse "router noisy_topk with granularity" "noisy_topk.*granularity" "${U[@]}" --load "$D" --num-experts 4 --granularity 2 --router noisy_topk
refuse "router gshard" "gshard" "${U[@]}" --load "$D" --num-experts 4 --router gshard
refuse "router expert_choice" "expert_choice" "${U[@]}" --load "$D" --num-experts 4 --router expert_choice
refuse "top-k above the copies" "exceeds the 2 copies" "${U[@]}" --load "$D" --num-experts 4 --granularity 2 --top-k 3
refuse "missing --num-experts" "required" "${U[@]}" --load "$D"
# sizes are bounded before anything is built: 65536 experts of a 512-wide FFN in 3 blocks (4e11
# parameters) are refused with the bytes they need and this node's memory
"$TED" train --data data/moby-dick.txt --n-layer 3 --n-embd 512 --n-head 4 --n-positions 32 --steps 0 \
  --save "$W/wide" >/dev/null 2>&1 || bad "wide dense run"
refuse "65536 experts past this node's memory" "upcycle: --num-experts 65536: the MoE model's 4.1" "${U[@]}" \
  --load "$W/wide" --num-experts 65536
refuse "under mpirun" "one process" mpiexec --oversubscribe --allow-run-as-root -np 2 "${U[@]}" --load "$D" --num-experts 4
sum=$(cat "$W/g1/model.safetensors" "$W/g1/config.json" | md5sum)
refuse "--save exists" "overwrites nothing" "$TED" upcycle --load "$D" --num-experts 4 --save "$W/g1"
[ "$(cat "$W/g1/model.safetensors" "$W/g1/config.json" | md5sum)" = "$sum" ] && ok "the existing folder is unchanged" ||
  bad "the existing folder changed"
# a broken dense folder: a missing tensor, a non-finite one, another activation (copies of hf)
broken() {   # name python-edit
  rm -rf "$W/$1"; cp -a "$W/hf" "$W/$1"
  "$PY" - "$W/$1" "$2" <<'PY'
import json, sys, torch
sys.path.insert(0, "bench")
import torch_ref
d, how = sys.argv[1:]
P = torch_ref.st_read(f"{d}/model.safetensors")
if how == "missing": del P["h.1.mlp.c_fc.bias"]
if how == "nan": P["h.0.attn.c_proj.weight"][3, 5] = float("nan")
if how == "head": P["lm_head.weight"] = P["lm_head.weight"] * 2
torch_ref.st_write(f"{d}/model.safetensors", P)
c = json.load(open(f"{d}/config.json"))
if how == "act": c["activation_function"] = "gelu"
if how == "llama": c["model_type"] = "llama"
if how == "shape": c["n_inner"] = 4 * c["n_embd"] + 32   # the tensors keep 4 x n_embd
json.dump(c, open(f"{d}/config.json", "w"))
PY
}
for how in missing nan head act llama shape; do broken "b_$how" $how; done
refuse "a missing tensor" "transformer.h.1.mlp.c_fc.bias is missing" "${U[@]}" --load "$W/b_missing" --num-experts 4
refuse "a NaN" "transformer.h.0.attn.c_proj.weight holds nan" "${U[@]}" --load "$W/b_nan" --num-experts 4
refuse "a shape that is not config.json's" "transformer.h.0.mlp.c_fc.weight has shape \[32, 128\], the model needs \[32, 160\]" \
  "${U[@]}" --load "$W/b_shape" --num-experts 4
refuse "an untied head" "lm_head.weight differs" "${U[@]}" --load "$W/b_head" --num-experts 4
refuse "exact GELU" "activation_function \"gelu\"" "${U[@]}" --load "$W/b_act" --num-experts 4
refuse "model_type llama without Llama's keys" "\"hidden_size\" is missing" "${U[@]}" --load "$W/b_llama" --num-experts 4
refuse "--init-from a NaN" "holds nan" "$TED" train "${M[@]}" --steps 1 --init-from "$W/b_nan"
refuse "--init-from, another n_embd" "n_embd 64 (flag) vs 32" "$TED" train "${M[@]}" --steps 1 --n-embd 64 --init-from "$D"
refuse "--init-from with --resume" "exclude each other" "$TED" train "${M[@]}" --steps 1 --init-from "$D" --resume "$W/dense"
refuse "--resume an upcycled folder (no optimizer state)" "trainer_state.json: cannot read" "$TED" train "${M[@]}" --steps 1 --resume "$W/g1"
summary
