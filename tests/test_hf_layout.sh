#!/usr/bin/env bash
# test_hf_layout.sh — a ted checkpoint in Hugging Face's layout, checked without `transformers`
# (test_hf_gpt2.sh runs the real library where it is installed):
#  - every safetensors file ted writes starts its header with {"__metadata__": {"format": "pt"}}
#    (transformers' loader reads metadata["format"] and fails on a file without it)
#  - config.json: the model and moe keys flat at the top level (design §7), GPT-2's own keys with
#    GPT-2's meaning, no "ted" object; no top-level key is a transformers config or generation key it
#    would misread, but for the MoE top_k, which generation_config.json overrides (it holds the
#    end-of-text token and no sampling key, so transformers' sampling keeps its defaults)
#  - the dense checkpoint, read by the independent PyTorch GPT-2 of bench/torch_ref.py by the
#    Hugging Face tensor names and the top-level GPT-2 keys: its logits give ted eval's loss over 8
#    windows (rel 1e-5), and its greedy continuation of a prompt is ted generate --top-k 1's, token
#    for token
#  - an MoE checkpoint read the same way gives ted eval's loss too
#  - a config.json of an earlier version (ted's keys but GPT-2's in a "ted" object) still loads, with
#    the same loss; a key both in "ted" and at the top level is refused in one line
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
PY=/usr/bin/python3
M=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --micro-batch 4 --steps 40 --lr 3e-3 --warmup 0
   --eval-windows 2 --log-every 0)
"$TED" train "${M[@]}" --save "$W/dense" >/dev/null 2>&1 || fail "dense run"
"$TED" train "${M[@]}" --num-experts 4 --top-k 2 --save "$W/moe" >/dev/null 2>&1 || fail "moe run"
D=$W/dense/step_00000040 E=$W/moe/step_00000040
ev() { "$TED" eval --load "$1" --data data/moby-dick.txt --split all --windows 8 2>/dev/null; }
evd=$(ev "$D") || fail "ted eval dense"
eve=$(ev "$E") || fail "ted eval moe"
prompt="Call me Ishmael. Some"
gen=$("$TED" generate --load "$D" --prompt "$prompt" --tokens 24 --top-k 1 2>/dev/null | od -An -tu1 -v | tr -s ' \n' ' ') \
  || fail "ted generate"
"$PY" - "$D" "$E" "$evd" "$eve" "$prompt" "$gen" <<'PY' || fail "layout"
import json, os, struct, sys
sys.path.insert(0, "bench")
import torch, torch_ref
dense, moe, evd, eve, prompt, gen = sys.argv[1:]
evd, eve = json.loads(evd), json.loads(eve)
for ck in (dense, moe):
    for f in sorted(os.listdir(ck)):
        if f.endswith(".safetensors"):
            raw = open(os.path.join(ck, f), "rb").read()
            (n,) = struct.unpack("<Q", raw[:8])
            meta = json.loads(raw[8:8 + n]).get("__metadata__")
            assert meta == {"format": "pt"}, f"{ck}/{f}: __metadata__ {meta}"
            print(f"ok   {os.path.basename(ck)}/{f}: __metadata__ {meta}")
# transformers' PretrainedConfig / GenerationConfig keys (v4.39 names), which a ted key at the top level
# would set; GPT-2's own keys are written with GPT-2's meaning and checked below
GEN = {"max_length", "max_new_tokens", "min_length", "min_new_tokens", "early_stopping", "max_time", "do_sample",
       "num_beams", "num_beam_groups", "penalty_alpha", "use_cache", "temperature", "top_k", "top_p", "typical_p",
       "epsilon_cutoff", "eta_cutoff", "diversity_penalty", "repetition_penalty", "encoder_repetition_penalty",
       "length_penalty", "no_repeat_ngram_size", "bad_words_ids", "force_words_ids", "renormalize_logits",
       "constraints", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
       "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "forced_decoder_ids",
       "sequence_bias", "guidance_scale", "low_memory", "num_return_sequences", "output_attentions",
       "output_hidden_states", "output_scores", "return_dict_in_generate", "pad_token_id", "bos_token_id",
       "eos_token_id", "decoder_start_token_id", "num_assistant_tokens", "num_assistant_tokens_schedule"}
BASE = {"return_dict", "torchscript", "torch_dtype", "use_bfloat16", "tf_legacy_loss", "pruned_heads",
        "tie_word_embeddings", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
        "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "architectures",
        "finetuning_task", "id2label", "label2id", "num_labels", "task_specific_params", "problem_type",
        "tokenizer_class", "prefix", "sep_token_id", "model_type", "transformers_version", "name_or_path"}
GPT2 = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
        "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "summary_type",
        "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
        "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_ctx"}
WRITTEN = {"bos_token_id", "eos_token_id", "torch_dtype", "tie_word_embeddings", "architectures", "model_type"}
# design §7's model and moe keys, and ted's other flat keys (config_model_json)
SPEC = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "num_experts", "top_k", "moe_every",
        "capacity_factor", "min_capacity", "group_size", "aux_coef", "z_coef"}
TED = SPEC | {"seq_len", "router", "use_rts", "jitter_eps", "importance_coef", "load_coef", "bias_update_rate",
              "num_groups", "topk_groups", "shared_experts", "expert_inner", "expert_type", "shared_expert_gate",
              "topk_renorm"}
for ck in (dense, moe):
    cfg = json.load(open(f"{ck}/config.json"))
    assert "ted" not in cfg and SPEC <= set(cfg), f"{ck}: the model and moe keys are not flat: {sorted(cfg)}"
    for k in cfg:
        if k == "ted_note":
            continue
        assert k not in GEN or k in WRITTEN or k == "top_k", f"{ck}: top-level {k} is a generation key"
        assert k in GPT2 or k in WRITTEN or k in TED, f"{ck}: top-level {k} is neither GPT-2's, ted's nor written on purpose"
    gcf = json.load(open(f"{ck}/generation_config.json"))
    eot = min(50256, cfg["vocab_size"] - 1)   # the end-of-text token (byte vocabularies: the last)
    assert gcf == {"bos_token_id": eot, "eos_token_id": eot}, f"{ck}: {gcf}"
    assert cfg.get("bos_token_id", eot) == eot and cfg.get("eos_token_id", eot) == eot, f"{ck}: {cfg}"
    print(f"ok   {os.path.basename(os.path.dirname(ck))}/config.json: flat, {sorted(set(cfg) & TED - SPEC)} beside "
          f"design §7's keys; generation_config.json {gcf} (transformers reads it instead of config.json's top_k)")
cfg = json.load(open(f"{dense}/config.json"))
assert cfg["model_type"] == "gpt2" and cfg["n_ctx"] == cfg["n_positions"] and cfg["activation_function"] == "gelu_new"
assert cfg["layer_norm_epsilon"] == torch_ref.LN_EPS and cfg["tie_word_embeddings"] is True

def check_loss(ck, ev, name):
    c, P = torch_ref.load_checkpoint(ck)   # by the Hugging Face names; float64
    data = torch_ref.SequentialData("data/moby-dick.txt", c.seq_len, split=False)
    w = torch.stack([data.window(i) for i in range(8)])
    with torch.no_grad():
        r = torch_ref.step_loss(P, c, [(w[:, :-1], w[:, 1:])], backward=False)
    rel = abs(r["lm_loss"] - ev["lm_loss"]) / ev["lm_loss"]
    assert rel < 1e-5, (name, r["lm_loss"], ev["lm_loss"])
    print(f"ok   {name}: torch_ref lm_loss {r['lm_loss']:.7f} = ted eval {ev['lm_loss']:.7f} (rel {rel:.1e})")
    return c, P

c, P = check_loss(dense, evd, "dense")
want = [int(t) for t in gen.split()]
ids = list(prompt.encode())
assert want[:len(ids)] == ids and len(want) >= len(ids) + 24, f"ted generate's output {bytes(want)!r}"
out = want[len(ids):len(ids) + 24]   # the prompt, 24 tokens, then a newline
x = torch.tensor([ids])
got = []
with torch.no_grad():
    for _ in range(len(out)):
        logits = torch_ref.forward(P, c, x[:, -c.n_positions:])["logits"][0, -1]
        t = int(torch.argmax(logits))
        got.append(t)
        x = torch.cat([x, torch.tensor([[t]])], 1)
assert got == out, f"greedy: torch_ref {bytes(got)!r} vs ted {bytes(out)!r}"
print(f"ok   greedy continuation identical: {bytes(got)!r}")
check_loss(moe, eve, "moe")
PY
# a config.json of an earlier version: ted's keys other than GPT-2's shape keys in a "ted" object
nested() { rm -rf "$W/$1" && cp -a "$2" "$W/$1" && "$PY" - "$W/$1/config.json" "$3" <<'PY'
import json, sys
p, mode = sys.argv[1:]
c = json.load(open(p))
gpt2 = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "model_type", "architectures", "n_ctx",
        "activation_function", "layer_norm_epsilon", "resid_pdrop", "embd_pdrop", "attn_pdrop", "initializer_range",
        "scale_attn_weights", "tie_word_embeddings", "bos_token_id", "eos_token_id", "torch_dtype", "ted_note"}
t = {k: c.pop(k) for k in list(c) if k not in gpt2}
c["ted"] = t
if mode == "both": c["top_k"] = t["top_k"]
json.dump(c, open(p, "w"), indent=1)
PY
}
nested old "$E" nested
[ "$(ev "$W/old")" = "$eve" ] && echo "ok   a config.json with ted's keys in \"ted\" (earlier) loads, same eval" ||
  fail "nested config.json: $(ev "$W/old")"
nested both "$E" both
rc=0; "$TED" eval --load "$W/both" --data data/moby-dick.txt --windows 2 >/dev/null 2>"$W/err" || rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q 'top_k.*both' "$W/err" \
  && echo "ok   a key both in ted and at the top level: $(cat "$W/err")" || fail "clash: rc $rc $(cat "$W/err")"
echo "all passed"
