#!/usr/bin/env bash
# test_hf_gpt2.sh — a dense ted checkpoint (num_experts 1) loads in Hugging Face transformers:
# GPT2LMHeadModel.from_pretrained(checkpoint dir) reads its config.json and model.safetensors,
# and the cross-entropy of its logits over 8 validation windows equals `ted eval`'s lm_loss
# over the same windows (rel. 1e-5).
# An MoE checkpoint's config.json says model_type "ted_moe" and transformers refuses it.
# Runs where `import transformers` works in /usr/bin/python3; elsewhere exits 77 (skipped).
source "${TED_ROOT:?}/tests/lib.sh"
PY=/usr/bin/python3
if ! "$PY" -c 'import transformers' 2>/dev/null; then
  echo "SKIPPED: transformers is not importable by $PY here"
  exit 77
fi
M=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --micro-batch 4 --steps 3
   --eval-windows 2)
"$TED" train "${M[@]}" --save "$W/dense" >/dev/null 2>&1 || fail "dense run"
"$TED" train "${M[@]}" --num-experts 4 --save "$W/moe" >/dev/null 2>&1 || fail "moe run"
ev=$("$TED" eval --load "$W/dense" --data data/moby-dick.txt --windows 8 2>/dev/null) || fail "ted eval"
"$PY" - "$W/dense/step_00000003" "$W/moe/step_00000003" "$ev" <<'PY' || fail "transformers"
import json, sys, torch, transformers
dense, moe, ev = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = transformers.GPT2LMHeadModel.from_pretrained(dense).eval()
raw = open("data/moby-dick.txt", "rb").read()
val = raw[int(0.9 * len(raw)):]   # ted's split of a text file: the last 10 % of the bytes
T = 32
x = torch.tensor([list(val[i * T:i * T + T + 1]) for i in range(8)])
with torch.no_grad():
    logits = model(x[:, :-1]).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item()
rel = abs(loss - ev["lm_loss"]) / ev["lm_loss"]
assert rel < 1e-5, (loss, ev["lm_loss"])
print(f"ok   transformers GPT2LMHeadModel loss {loss:.7f} = ted eval {ev['lm_loss']:.7f} (rel {rel:.1e})")
cfg = json.load(open(f"{moe}/config.json"))
assert cfg["model_type"] == "ted_moe" and "ted_note" in cfg
try:
    transformers.GPT2LMHeadModel.from_pretrained(moe)
    refused = False
except Exception:
    refused = True
print("ok   the MoE checkpoint says model_type ted_moe" + (" and transformers refuses it" if refused else ""))
PY
