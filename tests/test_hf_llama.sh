#!/usr/bin/env bash
# test_hf_llama.sh — model.arch llama checkpoints in Hugging Face's layouts (docs/llama.md), checked
# without `transformers` (not installable here) against the definitions of transformers v4.39
# (models/llama/{configuration,modeling}_llama.py, models/mixtral/{configuration,modeling}_mixtral.py),
# written out below:
#  - dense llama → LlamaForCausalLM; MoE in every block with Mixtral's router → MixtralForCausalLM:
#    architectures, model_type, every shape key with ted's value, no top-level key outside the
#    class's config, tensor names and shapes exactly those of the model's state_dict (lm_head only
#    when untied, nn.Linear [out, in]);
#  - an MoE llama with shared experts, q/k/v biases and the shared expert's sigmoid gate →
#    Qwen2MoeForCausalLM (transformers v4.40's models/qwen2_moe: Qwen2MoeConfig's keys, MoE every
#    decoder_sparse_step-th block, dense blocks of intermediate_size), checked the same way;
#  - an MoE llama with MoE every 2nd block and no shared experts, or with shared experts but no gate
#    or biases, says "ted_moe" and why;
#  - --init-from a transformers-style Qwen2-MoE folder (Qwen2MoeConfig's keys only, no ted keys) reads
#    back the saved model: the same config.json and model.safetensors, byte for byte (norm_topk_prob
#    true and false); a Qwen2-MoE that ted cannot compute (sliding windows, mlp_only_layers, a shared
#    expert not a whole number of experts wide) is refused in one line;
#  - a dense llama with q/k/v biases → Qwen2ForCausalLM (transformers v4.40's models/qwen2; Llama's
#    attention_bias would bias o_proj too), checked the same way and read back byte for byte from its
#    transformers-style folder; a Mixtral-form MoE with q/k/v biases says "ted_moe" (Mixtral's
#    attention has no biases);
#  - a transformers folder whose tensors the config.json has no place for (q/k/v biases under
#    attention_bias false, layers beyond num_hidden_layers) loads with a warning naming them;
#  - config.json values of the wrong type ("norm_topk_prob": "true", "attention_bias": 1, a number
#    for hidden_act), a key twice, and a Mixtral sliding_window below max_position_embeddings are
#    refused in one line; sliding_window null or >= max_position_embeddings is accepted;
#  - save → load round trip bit-exact in each layout: a run resumed from its step-3 checkpoint writes
#    the same model.safetensors at step 6 as the run straight through, byte for byte; also from a
#    step-3 checkpoint whose shared-expert block has the Mixtral-layout names ted wrote before.
source "${TED_ROOT:?}/tests/lib.sh"
PY=/usr/bin/python3
base=(--data data/moby-dick.txt --arch llama --n-layer 2 --n-embd 64 --n-head 4 --n-kv-head 2 --n-positions 32 --seq-len 32
      --micro-batch 2 --steps 6 --lr 3e-3 --warmup 0 --eval-windows 2 --log-every 0 --save-every 3)
echo '{"model": {"tie_word_embeddings": false}}' > "$W/untied.json"
echo '{"moe": {"router": "mixtral", "expert_type": "swiglu"}}' > "$W/mixtral.json"
echo '{"model": {"tie_word_embeddings": false, "qkv_bias": true}, "moe": {"router": "mixtral", "expert_type": "swiglu",
       "shared_expert_gate": true}}' > "$W/qwen.json"
echo '{"model": {"qkv_bias": true}, "moe": {"router": "topk", "topk_renorm": false, "expert_type": "swiglu",
       "shared_expert_gate": true}}' > "$W/qwen_plain.json"
echo '{"model": {"qkv_bias": true}}' > "$W/bias.json"
echo '{"model": {"qkv_bias": true}, "moe": {"router": "mixtral", "expert_type": "swiglu"}}' > "$W/mixbias.json"
declare -A args=(
  [llama]="--config $W/untied.json --n-inner 96"
  [mixtral]="--config $W/mixtral.json --num-experts 4 --top-k 2 --moe-every 1 --expert-inner 48"
  [every2]="--config $W/mixtral.json --num-experts 4 --top-k 1 --moe-every 2"
  [shared]="--config $W/mixtral.json --num-experts 4 --top-k 2 --moe-every 1 --shared-experts 1"
  [qwen]="--config $W/qwen.json --num-experts 4 --top-k 2 --moe-every 2 --shared-experts 2 --expert-inner 32 --n-inner 96
          --capacity-factor 0"
  [qwen_plain]="--config $W/qwen_plain.json --num-experts 4 --top-k 2 --moe-every 1 --shared-experts 1 --capacity-factor 0"
  [qwen2]="--config $W/bias.json --n-inner 96"
  [mixbias]="--config $W/mixbias.json --num-experts 4 --top-k 2 --moe-every 1"
)
for name in llama mixtral every2 shared qwen qwen_plain qwen2 mixbias; do
  # shellcheck disable=SC2086
  "$TED" train "${base[@]}" ${args[$name]} --save "$W/$name" >/dev/null 2>&1 || fail "$name run"
  # shellcheck disable=SC2086
  "$TED" train "${base[@]}" ${args[$name]} --resume "$W/$name/step_00000003" --save "$W/$name-resumed" >/dev/null 2>&1 \
    || fail "$name resume"
  cmp -s "$W/$name/step_00000006/model.safetensors" "$W/$name-resumed/step_00000006/model.safetensors" \
    || fail "$name: resumed from its step-3 checkpoint, the step-6 weights differ"
  echo "ok   $name: save → load → train round trip bit-exact"
done
"$PY" - "$W" <<'PY'
import json, struct, sys
W = sys.argv[1]
def header(path):
    raw = open(path, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    return {k: v["shape"] for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
# transformers v4.39 LlamaConfig.__init__ / MixtralConfig.__init__ parameters, and PretrainedConfig's own
LLAMA = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
         "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "pretraining_tp", "tie_word_embeddings",
         "rope_theta", "rope_scaling", "attention_bias", "attention_dropout"}
MIXTRAL = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
           "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_theta",
           "sliding_window", "attention_dropout", "num_experts_per_tok", "num_local_experts",
           "output_router_logits", "router_aux_loss_coef"}
# transformers v4.40 Qwen2MoeConfig.__init__ parameters, and PretrainedConfig's own
QWEN = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
        "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_theta",
        "use_sliding_window", "sliding_window", "max_window_layers", "attention_dropout", "decoder_sparse_step",
        "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok", "num_experts",
        "norm_topk_prob", "output_router_logits", "router_aux_loss_coef", "mlp_only_layers"}
# transformers v4.40 Qwen2Config.__init__ parameters, and PretrainedConfig's own
QWEN2 = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
         "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_theta",
         "use_sliding_window", "sliding_window", "max_window_layers", "attention_dropout"}
COMMON = {"architectures", "model_type", "torch_dtype", "ted"}
def qwen_moe(s, c, p):
    """Qwen2MoeSparseMoeBlock's state_dict: gate, experts.E (Qwen2MoeMLP of moe_intermediate_size),
    shared_expert (of shared_expert_intermediate_size), shared_expert_gate (nn.Linear(d, 1))."""
    d, E, fe, fs = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    s[p + "mlp.gate.weight"] = [E, d]
    for x, f in [(p + f"mlp.experts.{e}.", fe) for e in range(E)] + [(p + "mlp.shared_expert.", fs)]:
        s.update({x + "gate_proj.weight": [f, d], x + "up_proj.weight": [f, d], x + "down_proj.weight": [d, f]})
    s[p + "mlp.shared_expert_gate.weight"] = [1, d]
def state_dict(c, moe):
    """LlamaForCausalLM / MixtralForCausalLM.state_dict() names and shapes (v4.39: the rotary
    inv_freq buffer is not persistent; lm_head is left out of a tied checkpoint)."""
    d, L, H, KV, V = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    hd, f = d // H, c["intermediate_size"]
    s = {"model.embed_tokens.weight": [V, d], "model.norm.weight": [d]}
    if not c["tie_word_embeddings"]:
        s["lm_head.weight"] = [V, d]
    for i in range(L):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": [H * hd, d], p + "self_attn.k_proj.weight": [KV * hd, d],
                  p + "self_attn.v_proj.weight": [KV * hd, d], p + "self_attn.o_proj.weight": [d, H * hd],
                  p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d]})
        if moe in ("qwen2_moe", "qwen2"):   # Qwen2(Moe)Attention: q, k, v with biases; the decoder layer's MoE rule
            s.update({p + "self_attn.q_proj.bias": [H * hd], p + "self_attn.k_proj.bias": [KV * hd],
                      p + "self_attn.v_proj.bias": [KV * hd]})
        if moe == "qwen2_moe" and i not in c["mlp_only_layers"] and (i + 1) % c["decoder_sparse_step"] == 0:
            qwen_moe(s, c, p)
        elif moe == "mixtral":
            s[p + "block_sparse_moe.gate.weight"] = [c["num_local_experts"], d]
            for e in range(c["num_local_experts"]):
                x = p + f"block_sparse_moe.experts.{e}."
                s.update({x + "w1.weight": [f, d], x + "w2.weight": [d, f], x + "w3.weight": [f, d]})
        else:
            s.update({p + "mlp.gate_proj.weight": [f, d], p + "mlp.up_proj.weight": [f, d], p + "mlp.down_proj.weight": [d, f]})
    return s
def check(name, cls, mtype, keys, want):
    d = f"{W}/{name}/step_00000006"
    c = json.load(open(f"{d}/config.json"))
    assert c["architectures"] == [cls] and c["model_type"] == mtype, (name, c.get("architectures"), c.get("model_type"))
    extra = set(c) - keys - COMMON
    assert not extra, f"{name}: top-level keys outside {cls}'s config: {sorted(extra)}"
    for k, v in want.items():
        assert c.get(k) == v, f"{name}: {k} = {c.get(k)!r}, ted's model has {v!r}"
    got, exp = header(f"{d}/model.safetensors"), state_dict(c, mtype)
    assert got == exp, f"{name}: tensors differ from {cls}'s: {sorted(set(got) ^ set(exp))[:6]} " \
                       f"{[k for k in got if k in exp and got[k] != exp[k]][:6]}"
    print(f"ok   {name}: {cls}, {len(c) - 1} config keys, {len(got)} tensors as transformers names and shapes them")
shape = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 32, "hidden_act": "silu", "rms_norm_eps": 1e-5,
         "rope_theta": 10000}
check("llama", "LlamaForCausalLM", "llama", LLAMA,
      dict(shape, intermediate_size=96, tie_word_embeddings=False, pretraining_tp=1, rope_scaling=None, attention_bias=False))
check("mixtral", "MixtralForCausalLM", "mixtral", MIXTRAL,
      dict(shape, intermediate_size=48, tie_word_embeddings=True, num_local_experts=4, num_experts_per_tok=2,
           router_aux_loss_coef=0.005, sliding_window=None))
check("qwen", "Qwen2MoeForCausalLM", "qwen2_moe", QWEN,
      dict(shape, intermediate_size=96, tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
           moe_intermediate_size=32, shared_expert_intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=2,
           mlp_only_layers=[], router_aux_loss_coef=0.005, use_sliding_window=False))
check("qwen_plain", "Qwen2MoeForCausalLM", "qwen2_moe", QWEN,
      dict(shape, intermediate_size=256, tie_word_embeddings=True, num_experts=4, num_experts_per_tok=2,
           moe_intermediate_size=256, shared_expert_intermediate_size=256, norm_topk_prob=False, decoder_sparse_step=1))
check("qwen2", "Qwen2ForCausalLM", "qwen2", QWEN2,
      dict(shape, intermediate_size=96, tie_word_embeddings=True, use_sliding_window=False, sliding_window=None))
for name, why in (("every2", "moe_every"), ("shared", "shared experts without q/k/v biases"),
                  ("mixbias", "Mixtral's attention has no biases")):
    c = json.load(open(f"{W}/{name}/step_00000006/config.json"))
    assert c["model_type"] == "ted_moe" and "architectures" not in c and why in c["ted_note"], (name, c)
    print(f"ok   {name}: model_type ted_moe ({c['ted_note'][:70]}…)")
PY

# a checkpoint saved before shared experts took Qwen2-MoE's names (their block in Mixtral's layout:
# block_sparse_moe.gate, experts.E.w1/w3/w2, shared_expert.w1/w3/w2) still resumes, bit-exact
cp -r "$W/shared" "$W/shared-old"
for f in model optimizer; do
  "$PY" - "$W/shared/step_00000003/$f.safetensors" "$W/shared-old/step_00000003/$f.safetensors" <<'PY'
import json, re, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
def old(k):
    m = re.match(r"(model\.layers\.\d+)\.mlp\.(gate\.|experts\.|shared_expert\.)(.*)", k)
    if not m:
        return k
    rest = m.group(2) + m.group(3)
    for a, b in (("gate_proj.", "w1."), ("up_proj.", "w3."), ("down_proj.", "w2.")):
        rest = rest.replace(a, b)
    return m.group(1) + ".block_sparse_moe." + rest
h2 = {old(k): v for k, v in h.items()}
assert sum(k != old(k) for k in h) > 0
hb = json.dumps(h2, separators=(",", ":")).encode(); hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
PY
done
"$TED" train "${base[@]}" ${args[shared]} --resume "$W/shared-old/step_00000003" --save "$W/shared-old-resumed" \
  >"$W/shared-old.out" 2>&1 || fail "resume from a Mixtral-named shared-expert checkpoint: $(tail -1 "$W/shared-old.out")"
cmp -s "$W/shared/step_00000006/model.safetensors" "$W/shared-old-resumed/step_00000006/model.safetensors" ||
  fail "resumed from the Mixtral-named step-3 checkpoint, the step-6 weights differ"
echo "ok   shared: a checkpoint with the shared-expert block in Mixtral's names resumes bit-exact"

# --init-from a transformers-style Qwen2-MoE folder: the saved tensors, config.json without the ted
# object (as Qwen2MoeForCausalLM.save_pretrained writes it), read back into the same model
back=(--data data/moby-dick.txt --seq-len 32 --micro-batch 2 --steps 0 --eval-windows 2 --init-from)
for name in qwen2 qwen qwen_plain; do
Q=$W/$name/step_00000006
rm -rf "$W/qhf" "$W/qback"; mkdir -p "$W/qhf"; cp "$Q/model.safetensors" "$W/qhf/"
"$PY" - "$Q/config.json" "$W/qhf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert "ted" in c
del c["ted"]
c.update(transformers_version="4.40.0", use_cache=True)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
"$TED" train "${back[@]}" "$W/qhf" --save "$W/qback" >/dev/null 2>&1 || fail "$name: --init-from the Qwen2-MoE folder"
cmp -s "$Q/model.safetensors" "$W/qback/step_00000000/model.safetensors" ||
  fail "$name: --init-from the Qwen2-MoE folder: its weights differ from those saved"
cmp -s "$Q/config.json" "$W/qback/step_00000000/config.json" ||
  fail "$name: --init-from the Qwen2-MoE folder: the model read back is not the one saved"
echo "ok   $name: --init-from its transformers-style folder reads back the same weights and config.json, byte for byte"
[ "$name" = qwen2 ] && cp -r "$W/qhf" "$W/q2hf"
done
for bad in '"use_sliding_window": true' '"mlp_only_layers": [0]' '"shared_expert_intermediate_size": 48'; do
  mkdir -p "$W/qbad"; cp "$W/qhf/model.safetensors" "$W/qbad/"
  "$PY" -c 'import json, sys; c = json.load(open(sys.argv[1])); c.update(json.loads("{" + sys.argv[2] + "}"))
json.dump(c, open(sys.argv[3], "w"))' "$W/qhf/config.json" "$bad" "$W/qbad/config.json"
  rm -rf "$W/qbad-out"
  if "$TED" train "${back[@]}" "$W/qbad" --save "$W/qbad-out" >"$W/qbad.out" 2>&1; then fail "qwen: $bad was accepted"; fi
  [ "$(wc -l <"$W/qbad.out")" -eq 1 ] && grep -q "qbad/config.json: .*not a model ted computes" "$W/qbad.out" &&
    [ ! -e "$W/qbad-out" ] || fail "qwen: $bad: $(cat "$W/qbad.out")"
  echo "ok   qwen: $bad refused in one line"
done

# hf FROM OUT JSON: a transformers-style folder of run FROM's step 6 (config.json without the ted object),
# JSON's keys merged into its config.json (null removes a key); its tensors renamed by "REN" (a=b,...)
hf() {
  rm -rf "$2"; mkdir -p "$2"; cp "$W/$1/step_00000006/model.safetensors" "$2/"
  "$PY" - "$W/$1/step_00000006/config.json" "$2/config.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c.pop("ted")
for k, v in json.loads(sys.argv[3]).items():
    if v is None: c.pop(k, None)
    else: c[k] = v
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}
# expect_refused NAME NEEDLE FOLDER: ted eval refuses FOLDER in one line holding NEEDLE
expect_refused() {
  if "$TED" eval --load "$3" --data data/moby-dick.txt --windows 2 >"$W/r.out" 2>"$W/r.err"; then fail "$1 was accepted"; fi
  [ "$(wc -l <"$W/r.err")" -eq 1 ] && grep -qF -- "$2" "$W/r.err" || fail "$1: $(cat "$W/r.err")"
  echo "ok   $1 refused: $(cat "$W/r.err")"
}
# wrongly typed values and a key twice are refused, not read as their defaults
hf qwen "$W/t1" '{"norm_topk_prob": "true"}'
expect_refused 'qwen2_moe "norm_topk_prob": "true"' '"norm_topk_prob" must be a bool' "$W/t1"
hf llama "$W/t2" '{"attention_bias": 1}'
expect_refused 'llama "attention_bias": 1' '"attention_bias" must be a bool' "$W/t2"
hf llama "$W/t3" '{"hidden_act": 7}'
expect_refused 'llama "hidden_act": 7' '"hidden_act" must be a string' "$W/t3"
hf mixtral "$W/t4" '{"sliding_window": "4096"}'
expect_refused 'mixtral "sliding_window": "4096"' '"sliding_window" must be a number or null' "$W/t4"
hf llama "$W/t5" '{}'
sed -i '0,/"hidden_size"/s/"hidden_size": \([0-9]*\),/"hidden_size": \1, "hidden_size": 128,/' "$W/t5/config.json"
expect_refused "llama config.json with a key twice" 'key "hidden_size" appears twice' "$W/t5"
# Mixtral's sliding window: ted's attention is full causal, the same only for sequences within the window
hf mixtral "$W/w1" '{"sliding_window": 16}'
expect_refused "mixtral sliding_window 16 < max_position_embeddings 32" "sliding_window 16 is below max_position_embeddings 32" "$W/w1"
for win in null 32 4096; do
  hf mixtral "$W/w2" "{\"sliding_window\": $win}"
  [ "$win" = null ] && "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["sliding_window"]=None; json.dump(c,open(sys.argv[1],"w"))' "$W/w2/config.json"
  "$TED" eval --load "$W/w2" --data data/moby-dick.txt --windows 2 >"$W/w.out" 2>"$W/w.err" ||
    fail "mixtral sliding_window $win: $(cat "$W/w.err")"
done
echo "ok   mixtral sliding_window null, 32 and 4096 (>= max_position_embeddings 32) accepted"
# tensors config.json has no place for: a warning names them (and the loss is the model's without them)
hf qwen2 "$W/u1" '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "attention_bias": false,
                   "use_sliding_window": null, "sliding_window": null, "max_window_layers": null}'
"$TED" eval --load "$W/u1" --data data/moby-dick.txt --windows 2 >"$W/u.out" 2>"$W/u.err" || fail "u1: $(cat "$W/u.err")"
grep -q "warning: .*u1/model.safetensors: 6 tensors the model of its config.json does not read (ignored): model.layers.0.self_attn.q_proj.bias" \
  "$W/u.err" && echo "ok   q/k/v biases under LlamaForCausalLM's attention_bias false: $(cat "$W/u.err")" ||
  fail "unread biases: $(cat "$W/u.err")"
hf llama "$W/u2" '{"num_hidden_layers": 1}'
"$TED" eval --load "$W/u2" --data data/moby-dick.txt --windows 2 >"$W/u.out" 2>"$W/u.err" || fail "u2: $(cat "$W/u.err")"
grep -q "warning: .*u2/model.safetensors: 9 tensors .* (ignored): model.layers.1" "$W/u.err" &&
  echo "ok   num_hidden_layers 1 of 2: $(cat "$W/u.err")" || fail "layers beyond num_hidden_layers: $(cat "$W/u.err")"
