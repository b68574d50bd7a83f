#!/usr/bin/env python3
"""torch_ref.py - an independent PyTorch implementation of ted's model and trainer.

It exists for two reasons:
  * as the correctness reference the C trainer is compared against in the test suite
    (losses, gradients, weights after training), and
  * as the model code of the eager-PyTorch speed baseline (bench/torch_bench.py).

It follows docs/design.md sections 2 (the model), 3 (training) and 7 (checkpoints)
and nothing in ted's C sources. Run it with Debian's python (/usr/bin/python3, torch 1.13).

The model, in short (design §2):
  x = wte[tok] + wpe[pos]; L pre-LN blocks x += Attn(LN1 x); x += FFN(LN2 x); logits = LN_f(x) wte^T.
  Linear layers use the Hugging Face Conv1D layout, y = x @ W + b with W [in, out].
  Block i is a Mixture-of-Experts block when (i+1) % moe_every == 0 and num_experts > 1:
    router logits = LN2(x) @ router (fp32 or wider), p = softmax, top-k (ties -> lower index),
    gates = p (k = 1) or p renormalised over the k chosen (k >= 2), then per routing group
    (group_size whole sequences, S tokens) a capacity C = min(S, max(min_capacity,
    ceil(capacity_factor*k*S/E))) filled choice-major, then in token order; choices that find
    their expert full are dropped. capacity_factor <= 0 means dropless.
  Loss of a step = mean CE over every target token of the step
                 + aux_coef * sum_layers mean_{groups of the step} l_aux
                 + z_coef   * sum_layers mean_{tokens of the step} logsumexp(router logits)^2,
  where l_aux = E * sum_e f_e P_e, f_e = (#choices of e before dropping)/(k S) (no gradient),
  P_e = mean over the group's tokens of p_e.

The llama family (docs/llama.md, model.arch "llama" in the "ted" object of config.json), written
from the Hugging Face Llama/Mixtral modeling code's definitions, not from ted's C:
  x = embed_tokens[tok]; L pre-RMSNorm blocks x += o_proj(Attn(rope(q), rope(k), v)) with
  n_kv_head key/value heads repeated to the query heads (repeat_kv), x += FFN(RMSNorm x) with
  FFN = down(silu(gate x) * up x) or Mixtral's MoE (router logits = x @ gate^T, softmax, top-k,
  the k weights renormalised; experts w2(silu(w1 x) * w3 x)); logits = RMSNorm(x) @ lm_head^T
  (embed_tokens when tied). nn.Linear layout, no biases. Rotary: cos/sin of pos * theta^(-2i/hd),
  q*cos + rotate_half(q)*sin with rotate_half(x) = (-x2, x1) over the two halves of a head.
  Capacity, groups and the aux/z losses are those of the GPT-2 family below.
  Qwen2-MoE (from transformers' modeling_qwen2_moe.py, v4.40): q/k/v projections with biases
  (qkv_bias), and with shared experts the MoE block named mlp.gate / mlp.experts.E.{gate,up,down}_proj
  adds shared_expert(x) = down(silu(gate x) * up x) of shared_experts * expert_inner hidden units,
  times sigmoid(x @ shared_expert_gate^T) when shared_expert_gate (a [1, d] weight). With
  topk_renorm false (Qwen2-MoE's norm_topk_prob false) the k gates are the chosen p, unrenormalised.

Subcommands (all take checkpoint directories holding model.safetensors + config.json):
  init   write a random checkpoint (the init of design §2, optionally perturbed biases/LN for testing)
  train  train from a checkpoint with sequential data order; per-step metrics to --out JSON
  eval   mean loss over the first N windows of a whole file, all in one batch
  grad   gradient of the step-0 loss for every parameter, written as safetensors
  batch  run the commands of a file (one command line a line) in this one process, which saves
         the start of Python and torch per command; a failing command is named and the rest run
Run `torch_ref.py SUBCOMMAND --help` for the options.

Choices made where the design leaves room:
  * "aux_loss" is everything in the loss that is not the LM cross-entropy, coefficients
    included: loss = lm_loss + aux_loss.
  * Steps are numbered from 0; train --out writes {"step": [...], "loss": [...], ...}.
  * Routing groups never cross micro-batches; when group_size does not divide the micro-batch
    the last group of each micro-batch is shorter, with its own S and C. The aux term divides
    by the number of groups of the whole step, the z term by its number of tokens.
  * C is computed exactly from the decimal capacity_factor (1.1*2*20/4 gives 11, not 12).
  * top-k is taken on p (after the softmax), ties to the lower expert index.
  * In float64 runs the router is float64 too (the design's "fp32" is a lower bound).
  * A parameter the step did not touch (an expert without tokens) gets gradient 0, and
    AdamW updates it like any other (moments decay, weight decay applies).
  * grad_norm is reported before clipping; clip <= 0 turns clipping off.
  * floor(0.9 N) is computed in integers (9N // 10).
"""

import argparse
import json
import math
import os
import struct
import sys
from fractions import Fraction

import torch
import torch.nn.functional as F

LN_EPS = 1e-5

# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------

# The flat keys of a checkpoint's config.json, with the defaults the design gives (None: required).
CONFIG_KEYS = {
    "vocab_size": 256, "n_positions": None, "n_embd": None, "n_layer": None, "n_head": None,
    "n_inner": 0, "num_experts": 1, "top_k": 1, "moe_every": 2, "capacity_factor": 1.25,
    "min_capacity": 4, "group_size": 1, "aux_coef": 0.01, "z_coef": 0.0, "seq_len": 0,
}
# The llama family's keys (optional: a gpt2 checkpoint has none of them) and the routing keys
# the reference honours (router "mixtral" renormalises a single choice's gate too).
ARCH_KEYS = {"arch": "gpt2", "n_kv_head": 0, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": True, "router": "topk", "qkv_bias": False, "shared_experts": 0,
             "shared_expert_gate": False, "expert_inner": 0, "topk_renorm": True}
INT_KEYS = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "num_experts",
            "top_k", "moe_every", "min_capacity", "group_size", "seq_len"}


class Config:
    """Model + MoE settings, read from / written to a checkpoint's flat config.json."""

    def __init__(self, **kw):
        for key, default in CONFIG_KEYS.items():
            val = kw.get(key, default)
            if val is None:
                raise ValueError(f"config: missing key '{key}'")
            setattr(self, key, int(val) if key in INT_KEYS else float(val))
        for key, default in ARCH_KEYS.items():
            setattr(self, key, kw.get(key, default))
        self.n_kv_head = int(self.n_kv_head) or self.n_head
        if self.router not in ("topk", "mixtral"):
            raise ValueError(f"config: router {self.router} is not in the reference (topk, mixtral)")
        if self.arch == "llama" and self.num_experts > 1 and kw.get("expert_type", "swiglu") != "swiglu":
            raise ValueError("config: the llama reference has swiglu experts")
        if self.arch != "llama" and (self.shared_experts or self.qkv_bias):
            raise ValueError("config: shared experts and qkv_bias are in the llama reference only")
        self.expert_inner = int(self.expert_inner) or 0
        if self.n_inner <= 0:
            self.n_inner = 4 * self.n_embd
        if self.expert_inner <= 0:
            self.expert_inner = self.n_inner
        if self.seq_len <= 0:
            self.seq_len = self.n_positions
        if self.n_embd % self.n_head:
            raise ValueError("config: n_head must divide n_embd")
        if self.num_experts > 1 and not (1 <= self.top_k <= self.num_experts):
            raise ValueError("config: need 1 <= top_k <= num_experts")

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def is_moe(self, layer):
        return self.num_experts > 1 and (layer + 1) % self.moe_every == 0

    @property
    def qwen(self):
        """A llama MoE with shared experts: Qwen2-MoE's names (mlp.gate, mlp.experts.E.*_proj)."""
        return self.arch == "llama" and self.num_experts > 1 and self.shared_experts > 0

    def to_dict(self):
        out = {k: getattr(self, k) for k in CONFIG_KEYS}
        if self.arch == "llama":
            out.update({k: getattr(self, k) for k in ARCH_KEYS}, expert_type="swiglu")
        return out

    @staticmethod
    def load(path):
        """GPT-2's shape keys from the top level, as transformers reads them; ted's other keys
        from the "ted" object (a config.json written before that object has them flat)."""
        with open(path) as f:
            raw = json.load(f)
        ted = raw.pop("ted", {})
        if set(ted) & set(raw):
            raise ValueError(f"{path}: keys both in 'ted' and at the top level: {sorted(set(ted) & set(raw))}")
        return Config(**raw, **ted)


# --------------------------------------------------------------------------------------------
# safetensors (written by hand: no safetensors package on the machine)
# --------------------------------------------------------------------------------------------

_ST_DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8)}


def st_read(path):
    """Reads a safetensors file into {name: tensor} (F32/F64 only), keeping the file's dtype."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise ValueError(f"{path}: header length {hlen} past the end of the file")
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = blob[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        dtype, size = _ST_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        if end - begin != size * math.prod(shape) or end > len(data):
            raise ValueError(f"{path}: tensor {name} offsets inconsistent with its shape")
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin \
            else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(shape).clone()
    return out


def st_write(path, tensors):
    """Writes {name: tensor} as safetensors F32 (insertion order), atomically via a temp file."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().cpu().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)  # pad so the data section is 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------

def llama_moe_shapes(cfg, shapes, h):
    """One MoE block's parameters: Mixtral's names, or Qwen2-MoE's with shared experts."""
    d, fe, E = cfg.n_embd, cfg.expert_inner, cfg.num_experts
    moe = h + ("mlp." if cfg.qwen else "block_sparse_moe.")
    shapes[moe + "gate.weight"] = (E, d)
    names = ("gate_proj", "up_proj", "down_proj") if cfg.qwen else ("w1", "w3", "w2")
    for e in range(E):
        x = moe + f"experts.{e}."
        shapes[x + names[0] + ".weight"], shapes[x + names[1] + ".weight"] = (fe, d), (fe, d)
        shapes[x + names[2] + ".weight"] = (d, fe)
    if cfg.qwen:
        fs = cfg.shared_experts * fe
        for n, shape in (("gate_proj", (fs, d)), ("up_proj", (fs, d)), ("down_proj", (d, fs))):
            shapes[moe + f"shared_expert.{n}.weight"] = shape
        if cfg.shared_expert_gate:
            shapes[moe + "shared_expert_gate.weight"] = (1, d)


def llama_shapes(cfg):
    """A llama model's parameters: Hugging Face Llama / Mixtral / Qwen2-MoE names, nn.Linear [out, in]."""
    d, f, hd = cfg.n_embd, cfg.n_inner, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, d)}
    for i in range(cfg.n_layer):
        h = f"model.layers.{i}."
        shapes[h + "input_layernorm.weight"] = (d,)
        shapes[h + "self_attn.q_proj.weight"] = (cfg.n_head * hd, d)
        shapes[h + "self_attn.k_proj.weight"] = (cfg.n_kv_head * hd, d)
        shapes[h + "self_attn.v_proj.weight"] = (cfg.n_kv_head * hd, d)
        if cfg.qkv_bias:
            shapes[h + "self_attn.q_proj.bias"] = (cfg.n_head * hd,)
            shapes[h + "self_attn.k_proj.bias"] = (cfg.n_kv_head * hd,)
            shapes[h + "self_attn.v_proj.bias"] = (cfg.n_kv_head * hd,)
        shapes[h + "self_attn.o_proj.weight"] = (d, cfg.n_head * hd)
        shapes[h + "post_attention_layernorm.weight"] = (d,)
        if cfg.is_moe(i):
            llama_moe_shapes(cfg, shapes, h)
        else:
            shapes[h + "mlp.gate_proj.weight"], shapes[h + "mlp.up_proj.weight"] = (f, d), (f, d)
            shapes[h + "mlp.down_proj.weight"] = (d, f)
    shapes["model.norm.weight"] = (d,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    return shapes


def param_shapes(cfg):
    """Every parameter name (Hugging Face GPT-2 naming) with its shape, in a fixed order."""
    if cfg.arch == "llama":
        return llama_shapes(cfg)
    d, f, E = cfg.n_embd, cfg.n_inner, cfg.num_experts
    shapes = {"transformer.wte.weight": (cfg.vocab_size, d),
              "transformer.wpe.weight": (cfg.n_positions, d)}
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        shapes[h + "ln_1.weight"] = (d,)
        shapes[h + "ln_1.bias"] = (d,)
        shapes[h + "attn.c_attn.weight"] = (d, 3 * d)
        shapes[h + "attn.c_attn.bias"] = (3 * d,)
        shapes[h + "attn.c_proj.weight"] = (d, d)
        shapes[h + "attn.c_proj.bias"] = (d,)
        shapes[h + "ln_2.weight"] = (d,)
        shapes[h + "ln_2.bias"] = (d,)
        ffns = [h + "mlp."]
        if cfg.is_moe(i):
            shapes[h + "mlp.router.weight"] = (d, E)
            ffns = [h + f"mlp.experts.{e}." for e in range(E)]
        for p in ffns:
            shapes[p + "c_fc.weight"] = (d, f)
            shapes[p + "c_fc.bias"] = (f,)
            shapes[p + "c_proj.weight"] = (f, d)
            shapes[p + "c_proj.bias"] = (d,)
    shapes["transformer.ln_f.weight"] = (d,)
    shapes["transformer.ln_f.bias"] = (d,)
    return shapes


def init_params(cfg, seed=0, perturb=0.0, dtype=torch.float32, device="cpu"):
    """The init of design §2: weights N(0, 0.02), every c_proj N(0, 0.02/sqrt(2L)), biases 0, LN 1/0.
    perturb > 0 adds N(0, perturb) noise to biases and LayerNorm parameters, so that tests
    exercise them (a checkpoint with all-zero biases cannot catch a missing bias gradient).
    device: where the numbers are drawn (another device's generator draws other numbers; a
    billion-parameter model is drawn on a GPU in a second, on one CPU core in minutes)."""
    g = torch.Generator(device=device).manual_seed(seed)
    f64 = {"dtype": torch.float64, "device": device}
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith(".weight") and len(shape) == 2:
            residual = any(x in name for x in (".c_proj.", ".o_proj.", ".down_proj.", ".w2."))
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if residual else 0.02
            t = torch.randn(shape, generator=g, **f64) * std
        elif (".ln_" in name or "norm." in name) and name.endswith(".weight"):
            t = torch.ones(shape, **f64)
        else:
            t = torch.zeros(shape, **f64)
        if perturb > 0 and len(shape) == 1:
            t = t + perturb * torch.randn(shape, generator=g, **f64)
        params[name] = t.to(dtype)
    return params


def load_checkpoint(ckpt_dir, dtype=torch.float64):
    """Reads CKPT_DIR/config.json and CKPT_DIR/model.safetensors; checks names and shapes."""
    cfg = Config.load(os.path.join(ckpt_dir, "config.json"))
    tensors = st_read(os.path.join(ckpt_dir, "model.safetensors"))
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name not in tensors:
            raise ValueError(f"{ckpt_dir}: model.safetensors lacks {name}")
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"{ckpt_dir}: {name} has shape {list(tensors[name].shape)}, "
                             f"expected {list(shape)}")
        params[name] = tensors[name].to(dtype)
    extra = set(tensors) - set(params)
    if extra:
        raise ValueError(f"{ckpt_dir}: unexpected tensors {sorted(extra)[:5]}")
    return cfg, params


def save_checkpoint(out_dir, cfg, params):
    os.makedirs(out_dir, exist_ok=True)
    st_write(os.path.join(out_dir, "model.safetensors"), params)
    tmp = os.path.join(out_dir, "config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(cfg.to_dict(), f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "config.json"))


# --------------------------------------------------------------------------------------------
# routing
# --------------------------------------------------------------------------------------------

def top_k_first(p, k):
    """Indices [N, k] of the k largest entries of each row of p, largest first; equal values
    go to the lower index. Deterministic by construction (does not rely on topk/argmax)."""
    N, E = p.shape
    cols = torch.arange(E, device=p.device).expand(N, E)
    rest = p.detach().clone()
    chosen = []
    for _ in range(k):
        best = rest.max(dim=-1, keepdim=True).values
        idx = torch.where(rest == best, cols, torch.full_like(cols, E)).min(dim=-1).values
        chosen.append(idx)
        rest.scatter_(1, idx[:, None], float("-inf"))
    return torch.stack(chosen, dim=1)


def capacity(cfg, S):
    """Slots per expert for a group of S tokens (S itself when dropless: never binding)."""
    k, E = cfg.top_k, cfg.num_experts
    if cfg.capacity_factor <= 0:
        return S
    # Exact arithmetic on the decimal the config holds (0.1 stays 1/10), so C never depends
    # on how capacity_factor*k*S/E rounds in binary floating point.
    exact = Fraction(repr(cfg.capacity_factor)) * k * S / E
    c = max(cfg.min_capacity, math.ceil(exact))
    return min(c, S)


def assign_slots(experts, E, C):
    """experts: [G, S, k] chosen expert per (group, token, choice).
    Fills each expert's C slots choice-major, then in token order, per group.
    Returns slot [G, S, k] (position in the expert's buffer, -1 when dropped) and
    counts [G, E] (#choices of each expert before dropping)."""
    G, S, k = experts.shape
    counts = torch.zeros(G, E, dtype=torch.long, device=experts.device)
    slots = []
    for j in range(k):
        onehot = F.one_hot(experts[:, :, j], E)                       # [G, S, E]
        pos = torch.cumsum(onehot, dim=1) - 1 + counts[:, None, :]    # running count per expert
        pos = (pos * onehot).sum(-1)                                  # [G, S]
        slots.append(torch.where(pos < C, pos, torch.full_like(pos, -1)))
        counts = counts + onehot.sum(1)
    return torch.stack(slots, dim=2), counts


def group_bounds(n_seq, T, group_size):
    """Token ranges [(start, end)] of the routing groups of n_seq sequences of T tokens
    (group_size whole sequences each; the last group is shorter when it does not divide)."""
    S = group_size * T
    return [(a, min(a + S, n_seq * T)) for a in range(0, n_seq * T, S)]


def route(logits, cfg, n_seq, T):
    """The router's decisions for the tokens of n_seq sequences (rows of logits, sequence-major).
    Returns a dict: p [N,E], experts [N,k], gates [N,k] (differentiable), slot [N,k] (-1 dropped),
    aux_sum (sum over groups of l_aux), z_sum (sum over tokens of logsumexp^2), n_groups,
    dropped (number of dropped choices)."""
    E, k = cfg.num_experts, cfg.top_k
    p = torch.softmax(logits, dim=-1)
    experts = top_k_first(p, k)
    gp = p.gather(1, experts)
    plain = not cfg.topk_renorm or (k == 1 and cfg.router != "mixtral")   # Qwen2-MoE's norm_topk_prob false
    gates = gp if plain else gp / gp.sum(dim=-1, keepdim=True)

    bounds = group_bounds(n_seq, T, cfg.group_size)
    # Full-size groups are handled together, a shorter last group on its own.
    batches = []
    S = bounds[0][1] - bounds[0][0]
    n_full = sum(1 for a, b in bounds if b - a == S)
    batches.append((0, n_full, S))
    if n_full < len(bounds):
        a, b = bounds[-1]
        batches.append((a, 1, b - a))
    slot_parts, aux_sum = [], logits.new_zeros(())
    for start, G, S in batches:
        end = start + G * S
        sl, counts = assign_slots(experts[start:end].view(G, S, k), E, capacity(cfg, S))
        slot_parts.append(sl.reshape(G * S, k))
        f = counts.to(p.dtype) / (k * S)                  # fraction of choices, no gradient
        P = p[start:end].view(G, S, E).mean(dim=1)        # mean router probability
        aux_sum = aux_sum + E * (f * P).sum()
    slot = torch.cat(slot_parts, dim=0)
    z_sum = torch.logsumexp(logits, dim=-1).pow(2).sum()
    return {"p": p, "experts": experts, "gates": gates, "slot": slot, "aux_sum": aux_sum,
            "z_sum": z_sum, "n_groups": len(bounds), "dropped": int((slot < 0).sum())}


# --------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------

def linear(x, w, b):
    """Conv1D layout: y = x @ w + b, x [..., in], w [in, out]."""
    shape = x.shape
    y = torch.addmm(b, x.reshape(-1, shape[-1]), w)
    return y.view(*shape[:-1], w.shape[1])


def gelu(x):
    return F.gelu(x, approximate="tanh")


_MASKS = {}


def _causal_mask(T, device):
    """[T, T] bool, True above the diagonal (the future), cached per T."""
    key = (T, str(device))
    if key not in _MASKS:
        _MASKS[key] = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
    return _MASKS[key]


def attention(x, P, pre, cfg):
    B, T, d = x.shape
    H, hd = cfg.n_head, cfg.head_dim
    qkv = linear(x, P[pre + "c_attn.weight"], P[pre + "c_attn.bias"])
    q, k, v = qkv.split(d, dim=-1)                      # columns q | k | v
    q, k, v = (t.reshape(B, T, H, hd).transpose(1, 2) for t in (q, k, v))  # head h: cols h*hd..
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    causal = _causal_mask(T, x.device)
    att = torch.softmax(att.masked_fill(causal, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, d)
    return linear(y, P[pre + "c_proj.weight"], P[pre + "c_proj.bias"])


def ffn(x, P, pre):
    h = gelu(linear(x, P[pre + "c_fc.weight"], P[pre + "c_fc.bias"]))
    return linear(h, P[pre + "c_proj.weight"], P[pre + "c_proj.bias"])


def moe(x, P, pre, cfg, stats, llama=False):
    """Eager MoE: route, then per expert gather its kept tokens (index_select), run the FFN,
    and scatter the gated outputs back (index_add). Adds aux/z sums to stats."""
    B, T, d = x.shape
    E, k = cfg.num_experts, cfg.top_k
    xf = x.reshape(B * T, d)
    w_router = P[pre + "gate.weight"].t() if llama else P[pre + "router.weight"]
    rdtype = torch.float32 if xf.dtype in (torch.float16, torch.bfloat16) else xf.dtype
    logits = xf.to(rdtype) @ w_router.to(rdtype)       # router in fp32 (or wider)
    r = route(logits, cfg, B, T)
    stats["aux_sum"] = stats["aux_sum"] + r["aux_sum"]
    stats["z_sum"] = stats["z_sum"] + r["z_sum"]
    stats["dropped"] += r["dropped"]
    stats["routes"].append((r["experts"], r["slot"]))
    stats["choices"] += B * T * k

    # Kept (token, choice) pairs, sorted by expert (stable: token order inside an expert).
    keep = (r["slot"] >= 0).flatten()
    sel = keep.nonzero().squeeze(1)
    expert_of = r["experts"].flatten()[sel]
    order = torch.sort(expert_of, stable=True).indices
    sel = sel[order]
    tokens = torch.div(sel, k, rounding_mode="floor")
    gates = r["gates"].flatten()[sel].to(x.dtype)
    per_expert = torch.bincount(expert_of, minlength=E).tolist()

    out = torch.zeros_like(xf)
    start = 0
    for e, n in enumerate(per_expert):
        if n == 0:
            continue
        tok = tokens[start:start + n]
        xe, ex = xf.index_select(0, tok), pre + f"experts.{e}."
        y = (llama_mlp(xe, P, ex) if cfg.qwen else mixtral_expert(xe, P, ex)) if llama else ffn(xe, P, ex)
        out.index_add_(0, tok, y * gates[start:start + n, None])
        start += n
    return out.view(B, T, d)


def rms_norm(x, w, eps):
    """Llama's RMSNorm: x / sqrt(mean(x^2) + eps) * w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotary(T, hd, theta, dtype, device):
    """cos, sin [T, hd] as Hugging Face's LlamaRotaryEmbedding: inv_freq over the even indices,
    the frequencies repeated over the two halves of a head."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64, device=device) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64, device=device), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_attention(x, P, pre, cfg):
    B, T, d = x.shape
    H, KV, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    def proj(n):   # nn.Linear, with Qwen2's bias on q, k, v
        y = x @ P[pre + n + ".weight"].t()
        return y + P[pre + n + ".bias"] if cfg.qkv_bias else y
    q = proj("q_proj").view(B, T, H, hd).transpose(1, 2)
    k = proj("k_proj").view(B, T, KV, hd).transpose(1, 2)
    v = proj("v_proj").view(B, T, KV, hd).transpose(1, 2)
    cos, sin = rotary(T, hd, cfg.rope_theta, x.dtype, x.device)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))   # repeat_kv: kv head j serves heads j*g..
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    att = torch.softmax(att.masked_fill(_causal_mask(T, x.device), float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
    return y @ P[pre + "o_proj.weight"].t()


def llama_mlp(x, P, pre):
    return (F.silu(x @ P[pre + "gate_proj.weight"].t()) * (x @ P[pre + "up_proj.weight"].t())) @ P[pre + "down_proj.weight"].t()


def mixtral_expert(x, P, pre):
    return (F.silu(x @ P[pre + "w1.weight"].t()) * (x @ P[pre + "w3.weight"].t())) @ P[pre + "w2.weight"].t()


def qwen_moe(x, P, pre, cfg, stats):
    """Qwen2MoeSparseMoeBlock: the routed experts plus the shared expert, gated by a sigmoid."""
    y = moe(x, P, pre, cfg, stats, llama=True)
    s = llama_mlp(x, P, pre + "shared_expert.")
    if cfg.shared_expert_gate:
        s = torch.sigmoid(x @ P[pre + "shared_expert_gate.weight"].t()) * s
    return y + s


def llama_ffn(m, P, h, cfg, i, stats):
    if not cfg.is_moe(i):
        return llama_mlp(m, P, h + "mlp.")
    if cfg.qwen:
        return qwen_moe(m, P, h + "mlp.", cfg, stats)
    return moe(m, P, h + "block_sparse_moe.", cfg, stats, llama=True)


def llama_body(P, cfg, idx, stats):
    """The llama family's hidden states after the final norm."""
    x = P["model.embed_tokens.weight"][idx]
    eps = cfg.rms_norm_eps
    for i in range(cfg.n_layer):
        h = f"model.layers.{i}."
        x = x + llama_attention(rms_norm(x, P[h + "input_layernorm.weight"], eps), P, h + "self_attn.", cfg)
        m = rms_norm(x, P[h + "post_attention_layernorm.weight"], eps)
        x = x + llama_ffn(m, P, h, cfg, i, stats)
    x = rms_norm(x, P["model.norm.weight"], eps)
    return x @ P["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"].t()


def forward(P, cfg, idx, targets=None):
    """idx, targets: [B, T] token ids. Returns a dict of SUMS (so callers can normalise by
    the whole step): lm_sum (CE summed over targets), aux_sum (sum over MoE layers and groups
    of l_aux), z_sum (sum over MoE layers and tokens of logsumexp^2), n_groups (routing groups
    per MoE layer), dropped/choices counts, routes [(experts, slot)] per MoE layer, and the
    logits when targets is None."""
    B, T = idx.shape
    zero = next(iter(P.values())).new_zeros(())
    stats = {"aux_sum": zero, "z_sum": zero, "dropped": 0, "choices": 0, "routes": [],
             "n_groups": len(group_bounds(B, T, cfg.group_size))}
    if cfg.arch == "llama":
        return finish(stats, llama_body(P, cfg, idx, stats), targets, B, T)
    pos = torch.arange(T, device=idx.device)
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][pos][None]
    d = cfg.n_embd
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        a = F.layer_norm(x, (d,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], LN_EPS)
        x = x + attention(a, P, h + "attn.", cfg)
        m = F.layer_norm(x, (d,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], LN_EPS)
        x = x + (moe(m, P, h + "mlp.", cfg, stats) if cfg.is_moe(i) else ffn(m, P, h + "mlp."))
    x = F.layer_norm(x, (d,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], LN_EPS)
    logits = x @ P["transformer.wte.weight"].t()        # tied LM head
    return finish(stats, logits, targets, B, T)


def finish(stats, logits, targets, B, T):
    if targets is None:
        stats["logits"] = logits
        return stats
    stats["lm_sum"] = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T),
                                      reduction="sum")
    return stats


def step_loss(P, cfg, micro_batches, backward=True):
    """The loss of one step made of several micro-batches [(x, y), ...], normalised over the
    whole step (every target token, every routing group). With backward=True the gradients
    accumulate into P's .grad micro-batch by micro-batch (graph freed after each).
    Returns floats: loss, lm_loss, aux_loss (= loss - lm_loss, coefficients included),
    and the dropped-choice fraction."""
    n_tok = sum(x.numel() for x, _ in micro_batches)
    n_grp = sum(len(group_bounds(x.shape[0], x.shape[1], cfg.group_size)) for x, _ in micro_batches)
    tot = {"loss": 0.0, "lm": 0.0, "dropped": 0, "choices": 0}
    for x, y in micro_batches:
        s = forward(P, cfg, x, y)
        lm = s["lm_sum"] / n_tok
        loss = lm + cfg.aux_coef * s["aux_sum"] / n_grp + cfg.z_coef * s["z_sum"] / n_tok
        if backward:
            loss.backward()
        tot["loss"] += float(loss)
        tot["lm"] += float(lm)
        tot["dropped"] += s["dropped"]
        tot["choices"] += s["choices"]
    if backward:
        # A parameter the step never touched (an expert that got no tokens) has gradient 0,
        # not None: AdamW must still decay it and update its moments like any other.
        for t in P.values():
            if t.grad is None:
                t.grad = torch.zeros_like(t)
    return {"loss": tot["loss"], "lm_loss": tot["lm"], "aux_loss": tot["loss"] - tot["lm"],
            "dropped_frac": tot["dropped"] / tot["choices"] if tot["choices"] else 0.0}


# --------------------------------------------------------------------------------------------
# data (--data-order sequential)
# --------------------------------------------------------------------------------------------

def read_bytes(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()


class SequentialData:
    """Windows i = tokens [i*T, i*T+T+1) of the training split (first floor(0.9 N) bytes; split
    "val": the bytes after it; False: all of them); step s uses windows s*B ... s*B+B-1 (B global
    batch) modulo the number of windows."""

    def __init__(self, path, T, split=True):
        data = read_bytes(path)
        # floor(0.9 N) computed exactly in integers (0.9*N in floating point can be off by one)
        cut = (9 * len(data)) // 10
        self.tokens = data[cut:] if split == "val" else data[:cut] if split else data
        self.T = T
        self.nwin = (len(self.tokens) - 1) // T
        if self.nwin < 1:
            raise ValueError(f"{path}: too short for one window of {T + 1} tokens")

    def window(self, i):
        i %= self.nwin
        return self.tokens[i * self.T: i * self.T + self.T + 1]

    def micro_batches(self, step, micro_batch, grad_accum):
        B = micro_batch * grad_accum
        out = []
        for m in range(grad_accum):
            w = torch.stack([self.window(step * B + m * micro_batch + j)
                             for j in range(micro_batch)])
            out.append((w[:, :-1], w[:, 1:]))
        return out


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------

def lr_at(step, steps, lr, min_lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))


def make_optimizer(P, lr, weight_decay, foreach=None):
    """torch AdamW, beta (0.9, 0.95), eps 1e-8; weight decay on >= 2-D tensors only."""
    decay = [t for t in P.values() if t.dim() >= 2]
    no_decay = [t for t in P.values() if t.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kw = {} if foreach is None else {"foreach": foreach}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


class OneBitAdamExact:
    """1-bit Adam of design §6.3 on one process with compression "none" (the average of m over a
    group of one is m itself), written out from the formulas: steps 1..freeze are AdamW; from then
    on v is frozen and v_hat = v/(1-b2^freeze), while m keeps accumulating and m_hat = m/(1-b1^t)
    with the step t. Weight decay as AdamW (decoupled, >= 2-D tensors only). train() clips every
    step's gradient first, those after the freeze too (design §3)."""

    def __init__(self, P, lr, weight_decay, freeze, betas=(0.9, 0.95), eps=1e-8):
        self.params = list(P.values())
        self.param_groups = [{"lr": lr}]
        self.wd, self.freeze, self.b1, self.b2, self.eps = weight_decay, freeze, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        t, b1, b2, lr = self.t, self.b1, self.b2, self.param_groups[0]["lr"]
        bc1 = 1 - b1 ** t
        bc2 = 1 - b2 ** min(t, self.freeze)
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            m.mul_(b1).add_(g, alpha=1 - b1)
            if t <= self.freeze:
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
            if p.dim() >= 2:
                p.mul_(1 - lr * self.wd)
            p.sub_(lr * (m / bc1) / ((v / bc2).sqrt() + self.eps))


def clip_grads(P, clip):
    """Global gradient norm over every parameter (wte once); scaled by clip/(norm+1e-6)
    when norm > clip (clip <= 0: off). Returns the norm before clipping."""
    grads = [t.grad for t in P.values() if t.grad is not None]
    norm = math.sqrt(sum(float(torch.linalg.vector_norm(g)) ** 2 for g in grads))
    if clip > 0 and norm > clip:
        scale = clip / (norm + 1e-6)
        for g in grads:
            g.mul_(scale)
    return norm


def train(P, cfg, data, steps, micro_batch, grad_accum, lr, min_lr, warmup, weight_decay, clip,
          log=None, onebit_freeze=0):
    for t in P.values():
        t.requires_grad_(True)
    opt = OneBitAdamExact(P, lr, weight_decay, onebit_freeze) if onebit_freeze > 0 else make_optimizer(P, lr, weight_decay)
    hist = {k: [] for k in ("step", "loss", "lm_loss", "aux_loss", "grad_norm", "lr")}
    for s in range(steps):
        lr_s = lr_at(s, steps, lr, min_lr, warmup)
        for t in P.values():
            t.grad = None
        r = step_loss(P, cfg, data.micro_batches(s, micro_batch, grad_accum))
        # 1-bit Adam's compressed steps are clipped as every step (design §3): on one process the
        # local gradient's norm is the global one
        norm = clip_grads(P, clip)
        for g in opt.param_groups:
            g["lr"] = lr_s
        opt.step()
        for key, val in (("step", s), ("loss", r["loss"]), ("lm_loss", r["lm_loss"]),
                         ("aux_loss", r["aux_loss"]), ("grad_norm", norm), ("lr", lr_s)):
            hist[key].append(val)
        if log:
            log(f"step {s}: loss {r['loss']:.6f} lm {r['lm_loss']:.6f} aux {r['aux_loss']:.6f} "
                f"norm {norm:.4f} lr {lr_s:.3e} dropped {r['dropped_frac']:.3f}")
    return hist


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def cmd_init(a):
    cfg = Config(**{k: getattr(a, k) for k in CONFIG_KEYS if getattr(a, k, None) is not None})
    save_checkpoint(a.out, cfg, init_params(cfg, a.seed, a.perturb))
    print(json.dumps({"out": a.out, "params": sum(math.prod(s) for s in param_shapes(cfg).values())}))


def seq_len(a, cfg):
    T = a.seq_len or cfg.seq_len
    if T > cfg.n_positions:
        raise SystemExit(f"seq_len {T} > n_positions {cfg.n_positions}")
    if cfg.vocab_size < 256:
        raise SystemExit(f"vocab_size {cfg.vocab_size}: byte data needs 256")
    return T


def cmd_train(a):
    cfg, P = load_checkpoint(a.init, DTYPES[a.dtype])
    T = seq_len(a, cfg)
    data = SequentialData(a.data, T)
    log = (lambda s: print(s, file=sys.stderr)) if a.verbose else None
    hist = train(P, cfg, data, a.steps, a.micro_batch, a.grad_accum, a.lr, a.min_lr, a.warmup,
                 a.weight_decay, a.clip, log, a.onebit_freeze)
    with open(a.out, "w") as f:
        json.dump(hist, f)
        f.write("\n")
    if a.save:
        save_checkpoint(a.save, cfg, {k: v.detach() for k, v in P.items()})


def cmd_eval(a):
    cfg, P = load_checkpoint(a.init, DTYPES[a.dtype])
    T = seq_len(a, cfg)
    data = SequentialData(a.data, T, split=False)
    if a.windows > data.nwin:
        raise SystemExit(f"eval: {a.data} has only {data.nwin} windows of {T + 1} tokens")
    w = torch.stack([data.window(i) for i in range(a.windows)])
    with torch.no_grad():
        r = step_loss(P, cfg, [(w[:, :-1], w[:, 1:])], backward=False)
    out = json.dumps({"loss": r["loss"], "lm_loss": r["lm_loss"], "aux_loss": r["aux_loss"],
                      "windows": a.windows})
    if a.out:
        with open(a.out, "w") as f:
            f.write(out + "\n")
    else:
        print(out)


def cmd_grad(a):
    cfg, P = load_checkpoint(a.init, DTYPES[a.dtype])
    T = seq_len(a, cfg)
    data = SequentialData(a.data, T)
    for t in P.values():
        t.requires_grad_(True)
    r = step_loss(P, cfg, data.micro_batches(0, a.batch, 1))
    st_write(a.out, {k: v.grad for k, v in P.items()})
    print(json.dumps({"loss": r["loss"], "lm_loss": r["lm_loss"], "aux_loss": r["aux_loss"],
                      "dropped_frac": r["dropped_frac"]}))


def cmd_batch(a):
    import shlex
    import traceback
    failed = 0
    with open(a.file) as f:
        lines = [(n, l) for n, l in enumerate(f, 1) if l.strip() and not l.lstrip().startswith("#")]
    for n, line in lines:
        argv = shlex.split(line)
        if argv and argv[0] == "batch":
            raise SystemExit(f"{a.file}:{n}: batch inside batch")
        try:
            main(argv)
        except (Exception, SystemExit) as e:   # argparse and the commands exit with SystemExit
            if isinstance(e, SystemExit) and e.code in (0, None):
                continue
            failed += 1
            print(f"torch_ref batch: {a.file}:{n}: {line.strip()}: failed", file=sys.stderr)
            if not isinstance(e, SystemExit):
                traceback.print_exc()
            elif e.code not in (1, 2):
                print(e.code, file=sys.stderr)
    if failed:
        raise SystemExit(f"torch_ref batch: {failed} of {len(lines)} commands failed")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("init", help="write a random checkpoint")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--perturb", type=float, default=0.0,
                   help="std of noise added to biases and LayerNorm params (testing)")
    for key, default in CONFIG_KEYS.items():
        p.add_argument("--" + key.replace("_", "-"), dest=key,
                       type=int if key in INT_KEYS else float, default=default)

    def common(p):
        p.add_argument("--init", required=True, help="checkpoint directory")
        p.add_argument("--data", required=True, help="text file (bytes, V 256)")
        p.add_argument("--seq-len", type=int, default=0, help="T (default: config seq_len)")
        p.add_argument("--dtype", choices=DTYPES, default="float64")
        p.add_argument("--threads", type=int, default=0)

    p = sub.add_parser("train", help="train with sequential data order")
    common(p)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--out", required=True, help="per-step metrics JSON")
    p.add_argument("--save", default="", help="write the final weights here")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--onebit-freeze", type=int, default=0,
                   help="1-bit Adam (one process, compression none) with this freeze_step instead of AdamW")

    p = sub.add_parser("eval", help="mean loss over the first N windows of the whole file")
    common(p)
    p.add_argument("--windows", type=int, required=True)
    p.add_argument("--out", default="", help="write the JSON here (default: stdout)")

    p = sub.add_parser("grad", help="gradient of the step-0 loss as safetensors")
    common(p)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("batch", help="run the command lines of a file in this one process")
    p.add_argument("file")

    a = ap.parse_args(argv)
    if getattr(a, "threads", 0):
        torch.set_num_threads(a.threads)
    {"init": cmd_init, "train": cmd_train, "eval": cmd_eval, "grad": cmd_grad, "batch": cmd_batch}[a.cmd](a)


if __name__ == "__main__":
    main()
