#!/usr/bin/env python3
"""torch_bench.py - the eager-PyTorch speed baseline for `ted bench`.

Builds the model of the bench shape (by default B 8, T 256, d 256, L 4, 4 heads, f 1024,
8 experts top-2 in every block, V 256, capacity_factor 1.0, group_size 1), feeds random tokens,
runs warm-up steps, then times full training steps (forward, backward, global-norm clipping,
AdamW) and prints one JSON object: ms_per_step (mean over the timed steps), its median and
minimum, cpu_ms_per_step (the process's CPU time, all threads, per step: what a shared machine
inflates least), tokens_per_s, threads, torch and the shape used. The timings are wall-clock: on
a machine shared with other work they include its interference (use the median/min to judge).
On an oversubscribed machine OMP_WAIT_POLICY=PASSIVE in the environment helps torch's OpenMP
a lot (2-3x here with other jobs running); the policy in effect is printed.

Two implementations of the same model (bench/torch_ref.py's, the one ted is tested against):
  --impl ref   (the default on cpu) torch_ref's own code: explicit attention, the reference's
               router, per expert index_select / FFN / index_add; AdamW foreach, fp32.
  --impl fast  (the default on cuda) what a competent PyTorch user runs eagerly:
               F.scaled_dot_product_attention (causal; explicit attention before torch 2), the
               router in fp32 with torch.topk, the tokens sorted by expert once (one
               index_select, each expert's FFN on its slice, one index_add), clip_grad_norm_
               on the device and, on cuda, the fused AdamW kernel (torch >= 2).
--check runs neither: it compares the fast model's loss and gradients with the reference's on
the same weights and tokens (float64 on the CPU, capacity and dropless) and exits 1 if they part.

--device cuda runs on the GPU (the clock is read after torch.cuda.synchronize()) and first times
a bf16 matmul of --matmul N (8192) cubed in the same process (matmul_bf16_tflops: the card's
attainable rate, to put next to MFU). --bf16 is the usual mixed-precision recipe: forward and
loss under torch.autocast(bfloat16) with the router in fp32, backward outside it; weights,
gradients and AdamW stay fp32. --capacity-factor 0 is dropless, as in ted. --peak-tflops X (989.4
on cuda) adds "mfu" (mean) and "mfu_median" = model FLOPs/token (ted's model_flops_per_token,
src/model/model.c) * tokens/s / (X 1e12); on cuda "peak_mem_gib" is torch.cuda.max_memory_allocated.
bench/gpu_bench.sh compares it with ted.

    /usr/bin/python3 bench/torch_bench.py [--steps 10] [--warmup 3] [--batch 8] [--seq-len 256]
        [--n-embd 256] [--n-layer 4] [--n-head 4] [--n-inner 1024] [--num-experts 8] [--top-k 2]
        [--moe-every 1] [--vocab-size 256] [--capacity-factor 1.0] [--group-size 1]
        [--device cpu|cuda] [--impl ref|fast] [--bf16] [--peak-tflops X] [--fused-adamw]
        [--matmul N] [--check]
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref as ref  # noqa: E402

SDPA = getattr(F, "scaled_dot_product_attention", None)   # torch >= 2.0


def model_flops_per_token(cfg, T):
    """ted's model_flops_per_token (src/model/model.c): 6 x the active matmul parameters (LM head
    V d; per block 4 d^2, plus d E + k 2 d f in an MoE block or 2 d f in a dense one) plus
    12 L T d for attention scores and values."""
    d, f = cfg.n_embd, cfg.n_inner
    active = cfg.vocab_size * d
    for layer in range(cfg.n_layer):
        active += 4 * d * d
        active += d * cfg.num_experts + cfg.top_k * 2 * d * f if cfg.is_moe(layer) else 2 * d * f
    return 6 * active + 12 * cfg.n_layer * T * d


# --------------------------------------------------------------------------------------------
# --impl ref: torch_ref's model
# --------------------------------------------------------------------------------------------

def fp32_router(moe):
    """Wraps torch_ref.moe for autocast: its `xf @ router` would run in bf16 under autocast,
    so the router logits are computed here in fp32 with autocast off and handed to route() in
    place of the bf16 ones (the bf16 product is unused and outside the loss graph: d E flops)."""
    def wrapped(x, P, pre, cfg, stats):
        with torch.autocast(x.device.type, enabled=False):
            logits = x.reshape(-1, x.shape[-1]).float() @ P[pre + "router.weight"].float()
        route = ref.route
        ref.route = lambda _logits, *rest: route(logits, *rest)
        try:
            return moe(x, P, pre, cfg, stats)
        finally:
            ref.route = route
    return wrapped


def clip_grads_device(P, clip):
    """torch_ref.clip_grads with the global norm summed on the device: one host sync per step
    instead of one per tensor (what matters on a GPU). Same rule: scale by clip/(norm+1e-6)
    when norm > clip."""
    grads = [t.grad for t in P.values() if t.grad is not None]
    norms = torch._foreach_norm(grads) if hasattr(torch, "_foreach_norm") else \
        [torch.linalg.vector_norm(g) for g in grads]
    norm = float(torch.linalg.vector_norm(torch.stack(norms)))
    if clip > 0 and norm > clip:
        torch._foreach_mul_(grads, clip / (norm + 1e-6))
    return norm


def ref_loss(P, cfg, x, y, n_grp):
    """torch_ref.step_loss's loss of one micro-batch, without its backward."""
    st = ref.forward(P, cfg, x, y)
    return (st["lm_sum"] / x.numel() + cfg.aux_coef * st["aux_sum"] / n_grp
            + cfg.z_coef * st["z_sum"] / x.numel())


# --------------------------------------------------------------------------------------------
# --impl fast: the same model as a PyTorch user writes it for speed
# --------------------------------------------------------------------------------------------

def fast_attention(x, P, pre, cfg):
    """Causal self-attention, x [B, T, d]: the fused kernel where torch has it."""
    B, T, d = x.shape
    H, hd = cfg.n_head, cfg.head_dim
    qkv = ref.linear(x, P[pre + "c_attn.weight"], P[pre + "c_attn.bias"])
    q, k, v = (t.reshape(B, T, H, hd).transpose(1, 2) for t in qkv.split(d, dim=-1))
    if SDPA is not None:
        y = SDPA(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(ref._causal_mask(T, x.device), float("-inf")), dim=-1)
        y = att @ v
    return ref.linear(y.transpose(1, 2).reshape(B, T, d), P[pre + "c_proj.weight"], P[pre + "c_proj.bias"])


def fast_route(xf, w, cfg, G, stats):
    """The router in fp32 for xf [N, d] in G groups: experts [N, k] (largest first), gates [N, k],
    the kept (token, choice) pairs' flat indices (None when dropless); adds aux and z to stats."""
    E, k = cfg.num_experts, cfg.top_k
    S = xf.shape[0] // G
    rd = torch.float32 if xf.dtype in (torch.float16, torch.bfloat16) else xf.dtype   # fp32 or wider
    with torch.autocast(xf.device.type, enabled=False):
        logits = xf.to(rd) @ w.to(rd)                                    # [N, E]
        p = torch.softmax(logits, dim=-1)
        gp, experts = p.topk(k, dim=-1)
        gates = gp / gp.sum(dim=-1, keepdim=True) if cfg.topk_renorm and k > 1 else gp
        counts = torch.zeros(G, E, dtype=rd, device=xf.device).scatter_add_(
            1, experts.view(G, S * k), torch.ones(G, S * k, dtype=rd, device=xf.device))
        stats["aux"] = stats["aux"] + E * (counts / (k * S) * p.view(G, S, E).mean(dim=1)).sum()
        stats["z"] = stats["z"] + torch.logsumexp(logits, dim=-1).pow(2).sum()
    if cfg.capacity_factor <= 0:
        return experts, gates, None
    slot, _ = ref.assign_slots(experts.view(G, S, k), E, ref.capacity(cfg, S))
    return experts, gates, (slot.flatten() >= 0).nonzero().squeeze(1)


def fast_moe(x, P, pre, cfg, stats):
    """x [B, T, d]: route, sort the kept (token, choice) pairs by expert, gather their rows once,
    run each expert's FFN on its slice, scatter the gated outputs back once."""
    B, T, d = x.shape
    xf = x.reshape(B * T, d)
    experts, gates, kept = fast_route(xf, P[pre + "router.weight"], cfg, B // cfg.group_size, stats)
    flat = experts.flatten()
    idx = torch.arange(flat.numel(), device=x.device) if kept is None else kept
    idx = idx[torch.sort(flat[idx], stable=True).indices]
    counts = torch.bincount(flat[idx], minlength=cfg.num_experts).tolist()   # the one host sync
    tok = torch.div(idx, cfg.top_k, rounding_mode="floor")
    xs = xf.index_select(0, tok)
    ys, at = [], 0
    for e, n in enumerate(counts):
        if n:
            ys.append(ref.ffn(xs[at:at + n], P, pre + f"experts.{e}."))
        at += n
    y = torch.cat(ys) * gates.flatten()[idx, None]
    return torch.zeros_like(xf).index_add_(0, tok, y.to(xf.dtype)).view(B, T, d)


def fast_loss(P, cfg, x, y, resid=None):
    """The loss of one micro-batch x, y [B, T] (torch_ref.step_loss's, one micro-batch). resid: the
    residual stream's dtype (None: what the ops give, fp32 under autocast); each LayerNorm reads it
    in fp32 (bench/resid_precision.py compares fp32 with bf16)."""
    B, T = x.shape
    d = cfg.n_embd
    stats = {"aux": 0.0, "z": 0.0}
    keep = (lambda t: t) if resid is None else (lambda t: t.to(resid))   # noqa: E731
    ln = lambda t, w: F.layer_norm(t.float() if resid is not None else t, (d,), P[w + ".weight"], P[w + ".bias"],  # noqa: E731
                                   ref.LN_EPS)
    h = keep(P["transformer.wte.weight"][x] + P["transformer.wpe.weight"][:T])
    for i in range(cfg.n_layer):
        pre = f"transformer.h.{i}."
        h = keep(h + fast_attention(ln(h, pre + "ln_1"), P, pre + "attn.", cfg))
        m = ln(h, pre + "ln_2")
        h = keep(h + (fast_moe(m, P, pre + "mlp.", cfg, stats) if cfg.is_moe(i) else ref.ffn(m, P, pre + "mlp.")))
    h = ln(h, "transformer.ln_f")
    logits = h @ P["transformer.wte.weight"].t()
    lm = F.cross_entropy(logits.reshape(B * T, -1), y.reshape(B * T))
    return lm + cfg.aux_coef * stats["aux"] / (B // cfg.group_size) + cfg.z_coef * stats["z"] / (B * T)


def fast_optimizer(P, dev, fused):
    """torch_ref.make_optimizer's AdamW (groups, betas, eps), fused where torch has it on cuda."""
    groups = [{"params": [t for t in P.values() if t.dim() >= 2], "weight_decay": 0.1},
              {"params": [t for t in P.values() if t.dim() < 2], "weight_decay": 0.0}]
    kw = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8}
    if fused and dev.type == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError):   # torch < 2.0
            pass
    return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


# --------------------------------------------------------------------------------------------
# the check, the matmul rate, the timed loop
# --------------------------------------------------------------------------------------------

def check(a):
    """The fast model against the reference: float64, CPU, capacity (with drops) and dropless."""
    worst = 0.0
    for cf in (0.5, 0.0):
        cfg = ref.Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4, n_inner=64,
                         num_experts=4, top_k=2, moe_every=2, capacity_factor=cf, min_capacity=1,
                         group_size=2, z_coef=0.01, seq_len=16)
        P = ref.init_params(cfg, seed=a.seed, perturb=0.1, dtype=torch.float64)
        w = torch.randint(0, cfg.vocab_size, (4, 17), generator=torch.Generator().manual_seed(a.seed))
        losses, grads = [], []
        for fn in (lambda Q: ref_loss(Q, cfg, w[:, :-1], w[:, 1:], 2), lambda Q: fast_loss(Q, cfg, w[:, :-1], w[:, 1:])):
            Q = {k: t.clone().requires_grad_(True) for k, t in P.items()}
            loss = fn(Q)
            loss.backward()
            losses.append(float(loss))
            grads.append({k: t.grad if t.grad is not None else torch.zeros_like(t) for k, t in Q.items()})
        rel = abs(losses[0] - losses[1]) / abs(losses[0])
        gerr = max(float((grads[0][k] - grads[1][k]).abs().max()) for k in grads[0])
        print(f"capacity factor {cf}: loss ref {losses[0]:.12f} fast {losses[1]:.12f} (rel {rel:.1e}), "
              f"max gradient difference {gerr:.1e}")
        worst = max(worst, rel, gerr)
    ok = worst <= 1e-10
    print(f"torch_bench --check: {'ok' if ok else 'FAIL'}: the fast model {'equals' if ok else 'differs from'} "
          f"the reference (worst {worst:.1e}, tolerance 1e-10)")
    return 0 if ok else 1


def matmul_tflops(dev, n, reps=20):
    """bf16 n x n x n matmuls per second on dev, in TFLOP/s (after 3 untimed ones)."""
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        z = x @ y
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        z = x @ y
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    del x, y, z
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()   # peak_mem_gib is the training's
    return 2 * n ** 3 * reps / dt / 1e12


def parse_args():
    ap = argparse.ArgumentParser(description="eager PyTorch training-step benchmark")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-inner", type=int, default=1024)
    ap.add_argument("--num-experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--moe-every", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--capacity-factor", type=float, default=1.0, help="0: dropless")
    ap.add_argument("--min-capacity", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="default: os.cpu_count()")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-foreach", action="store_true",
                    help="--impl ref: per-tensor AdamW loop instead of the multi-tensor (foreach) one")
    ap.add_argument("--fused-adamw", action="store_true",
                    help="--impl ref: torch's fused AdamW kernel (cuda, torch >= 2.0); --impl fast has it on cuda")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--impl", choices=("ref", "fast"), help="default: ref on cpu, fast on cuda")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast around forward + loss; fp32 weights, grads and AdamW")
    ap.add_argument("--peak-tflops", type=float,
                    help="peak FLOP/s (in TFLOP/s) to report MFU against (0: no MFU); default 989.4 on cuda "
                         "(H100/H200 SXM dense bf16, as ted bench), 0 on cpu")
    ap.add_argument("--matmul", type=int, default=8192, help="cuda: time a bf16 N^3 matmul first (0: no)")
    ap.add_argument("--check", action="store_true", help="the fast model against the reference, then exit")
    a = ap.parse_args()
    a.impl = a.impl or ("fast" if a.device == "cuda" else "ref")
    if a.peak_tflops is None:
        a.peak_tflops = 989.4 if a.device == "cuda" else 0.0
    if a.batch % a.group_size:
        ap.error("--group-size must divide --batch")
    return a


def make_step(a, P, cfg, dev):
    """One training step over a batch w [B, T+1]; returns (step function, optimizer name)."""
    x_of = lambda w: (w[:, :-1], w[:, 1:])   # noqa: E731
    amp = lambda: torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16)   # noqa: E731
    if a.impl == "fast":
        opt, name = fast_optimizer(P, dev, fused=True)
        params = list(P.values())

        def step(w):
            opt.zero_grad(set_to_none=True)
            with amp():
                loss = fast_loss(P, cfg, *x_of(w))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        return step, name
    if a.fused_adamw:
        opt, name = fast_optimizer(P, dev, fused=True)
    else:
        opt, name = ref.make_optimizer(P, 3e-4, 0.1, foreach=not a.no_foreach), "foreach" if not a.no_foreach else "loop"
    if a.bf16:
        ref.moe = fp32_router(ref.moe)
    n_grp = len(ref.group_bounds(a.batch, a.seq_len, cfg.group_size))
    clip = clip_grads_device if dev.type == "cuda" else ref.clip_grads

    def step(w):
        for t in P.values():
            t.grad = None
        if a.bf16:   # ref.step_loss for one micro-batch, with backward outside the autocast
            with amp():
                loss = ref_loss(P, cfg, *x_of(w), n_grp)
            loss.backward()
            for t in P.values():
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
        else:
            ref.step_loss(P, cfg, [x_of(w)])
        clip(P, 1.0)
        opt.step()
    return step, name


def main():
    a = parse_args()
    if a.check:
        return check(a)
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_bench: --device cuda but torch sees no CUDA device")
    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    extra = {"device": a.device, "impl": a.impl, "bf16": a.bf16, "sdpa": a.impl == "fast" and SDPA is not None}
    if a.device == "cuda" and a.matmul > 0:
        extra["matmul_bf16_tflops"] = round(matmul_tflops(dev, a.matmul), 1)
        extra["matmul_n"] = a.matmul
    cfg = ref.Config(vocab_size=a.vocab_size, n_positions=a.seq_len, n_embd=a.n_embd,
                     n_layer=a.n_layer, n_head=a.n_head, n_inner=a.n_inner,
                     num_experts=a.num_experts, top_k=a.top_k, moe_every=a.moe_every,
                     capacity_factor=a.capacity_factor, min_capacity=a.min_capacity,
                     group_size=a.group_size, seq_len=a.seq_len)
    P = ref.init_params(cfg, seed=a.seed, dtype=torch.float32, device=dev)
    for t in P.values():
        t.requires_grad_(True)
    step, extra["adamw"] = make_step(a, P, cfg, dev)
    g = torch.Generator().manual_seed(a.seed + 1)
    # a fresh random batch per step, drawn up front so that drawing it is not timed
    batches = [torch.randint(0, a.vocab_size, (a.batch, a.seq_len + 1), generator=g).to(dev)
               for _ in range(a.warmup + a.steps)]

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    for s in range(a.warmup):
        step(batches[s])
    times, cpu = [], []
    for s in range(a.warmup, a.warmup + a.steps):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        step(batches[s])
        sync()
        times.append(1000 * (time.perf_counter() - t0))
        cpu.append(1000 * (time.process_time() - c0))
    report(a, cfg, times, cpu, threads, extra)


def report(a, cfg, times, cpu, threads, extra):
    ms = sum(times) / max(1, len(times))
    median = sorted(times)[len(times) // 2] if times else 0.0
    tokens = a.batch * a.seq_len
    if a.peak_tflops > 0:
        per_token = model_flops_per_token(cfg, a.seq_len) / (a.peak_tflops * 1e12)
        extra["mfu"] = round(per_token * tokens / (ms / 1000), 4)
        extra["mfu_median"] = round(per_token * tokens / (median / 1000), 4) if median else 0.0
        extra["peak_tflops"] = a.peak_tflops
    if a.device == "cuda":
        extra["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        extra["gpu"] = torch.cuda.get_device_name()
    print(json.dumps({
        "ms_per_step": round(ms, 3),
        "ms_per_step_median": round(median, 3),
        "ms_per_step_min": round(min(times), 3) if times else 0.0,
        "cpu_ms_per_step": round(sum(cpu) / max(1, len(cpu)), 3),
        "tokens_per_s": round(tokens / (ms / 1000), 1),
        "threads": threads,
        "torch": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "steps": a.steps,
        "shape": {"batch": a.batch, "seq_len": a.seq_len, "n_embd": a.n_embd,
                  "n_layer": a.n_layer, "n_head": a.n_head, "n_inner": cfg.n_inner,
                  "num_experts": a.num_experts, "top_k": a.top_k, "moe_every": a.moe_every,
                  "vocab_size": a.vocab_size, "capacity_factor": a.capacity_factor,
                  "group_size": a.group_size},
        **extra,
    }))


if __name__ == "__main__":
    sys.exit(main())
