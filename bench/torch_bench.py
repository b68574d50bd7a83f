#!/usr/bin/env python3
"""torch_bench.py - the eager-PyTorch speed baseline for `ted bench`.

Builds the model of the bench shape (by default B 8, T 256, d 256, L 4, 4 heads, f 1024,
8 experts top-2 in every block, V 256, capacity_factor 1.0, group_size 1) with the reference
model code of bench/torch_ref.py (an eager MoE: per expert index_select, FFN, index_add),
feeds random tokens, runs warm-up steps, then times full training steps in float32 —
forward, backward, global-norm clipping and the AdamW step — on all the machine's cores.
Prints one JSON object: ms_per_step (mean over the timed steps), cpu_ms_per_step (the process's
CPU time, all threads, per step: what a shared machine inflates least), tokens_per_s, threads, torch,
plus the median and minimum step times and the shape used. The timings are wall-clock: on a
machine shared with other work they include its interference (use the median/min to judge).
On an oversubscribed machine OMP_WAIT_POLICY=PASSIVE in the environment helps torch's OpenMP
a lot (2-3x here with other jobs running); the policy in effect is printed.

--device cuda runs the same model on the GPU (the clock is read after torch.cuda.synchronize();
gradient clipping then takes one host sync instead of one per tensor). --bf16 is the usual
mixed-precision recipe: forward and loss under torch.autocast(bfloat16) with the router kept in
fp32 as docs/design.md says, backward outside it; weights, gradients and AdamW stay fp32. --peak-tflops X
adds "mfu" = model FLOPs/token (ted's model_flops_per_token, src/model/model.c) * tokens/s / (X 1e12);
on cuda "peak_mem_gib" is torch.cuda.max_memory_allocated. bench/gpu_bench.sh compares with ted.

    /usr/bin/python3 bench/torch_bench.py [--steps 10] [--warmup 3] [--batch 8] [--seq-len 256]
        [--n-embd 256] [--n-layer 4] [--n-head 4] [--n-inner 1024] [--num-experts 8] [--top-k 2]
        [--moe-every 1] [--vocab-size 256] [--capacity-factor 1.0] [--group-size 1]
        [--device cpu|cuda] [--bf16] [--peak-tflops X] [--fused-adamw]
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref as ref  # noqa: E402


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


def main():
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
    ap.add_argument("--capacity-factor", type=float, default=1.0)
    ap.add_argument("--min-capacity", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="default: os.cpu_count()")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-foreach", action="store_true",
                    help="per-tensor AdamW loop instead of the multi-tensor (foreach) one")
    ap.add_argument("--fused-adamw", action="store_true",
                    help="torch's fused AdamW kernel (cuda, torch >= 2.0): no foreach temporaries")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast around forward + loss; fp32 weights, grads and AdamW")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="peak FLOP/s (in TFLOP/s) to report MFU against (0: no MFU)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_bench: --device cuda but torch sees no CUDA device")

    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    cfg = ref.Config(vocab_size=a.vocab_size, n_positions=a.seq_len, n_embd=a.n_embd,
                     n_layer=a.n_layer, n_head=a.n_head, n_inner=a.n_inner,
                     num_experts=a.num_experts, top_k=a.top_k, moe_every=a.moe_every,
                     capacity_factor=a.capacity_factor, min_capacity=a.min_capacity,
                     group_size=a.group_size, seq_len=a.seq_len)
    P = {k: v.to(dev) for k, v in ref.init_params(cfg, seed=a.seed, dtype=torch.float32).items()}
    for t in P.values():
        t.requires_grad_(True)
    if a.fused_adamw:   # ref.make_optimizer's groups and hyper-parameters, fused kernel
        groups = [{"params": [t for t in P.values() if t.dim() >= 2], "weight_decay": 0.1},
                  {"params": [t for t in P.values() if t.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    else:
        opt = ref.make_optimizer(P, 3e-4, 0.1, foreach=not a.no_foreach)
    g = torch.Generator().manual_seed(a.seed + 1)
    # a fresh random batch per step, drawn up front so that drawing it is not timed
    batches = [torch.randint(0, a.vocab_size, (a.batch, a.seq_len + 1), generator=g).to(dev)
               for _ in range(a.warmup + a.steps)]
    if a.bf16:
        ref.moe = fp32_router(ref.moe)
    n_grp = len(ref.group_bounds(a.batch, a.seq_len, cfg.group_size))
    clip = clip_grads_device if a.device == "cuda" else ref.clip_grads

    def train_step(w):
        for t in P.values():
            t.grad = None
        if a.bf16:   # ref.step_loss for one micro-batch, with backward outside the autocast
            x, y = w[:, :-1], w[:, 1:]
            with torch.autocast(a.device, dtype=torch.bfloat16):
                st = ref.forward(P, cfg, x, y)
                loss = (st["lm_sum"] / x.numel() + cfg.aux_coef * st["aux_sum"] / n_grp
                        + cfg.z_coef * st["z_sum"] / x.numel())
            loss.backward()
            for t in P.values():
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
        else:
            ref.step_loss(P, cfg, [(w[:, :-1], w[:, 1:])])
        clip(P, 1.0)
        opt.step()

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    for s in range(a.warmup):
        train_step(batches[s])
    times, cpu = [], []
    for s in range(a.warmup, a.warmup + a.steps):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        train_step(batches[s])
        sync()
        times.append(1000 * (time.perf_counter() - t0))
        cpu.append(1000 * (time.process_time() - c0))

    ms = sum(times) / max(1, len(times))
    tokens_per_s = a.batch * a.seq_len / (ms / 1000)
    extra = {"device": a.device, "bf16": a.bf16}
    if a.peak_tflops > 0:
        extra["mfu"] = round(model_flops_per_token(cfg, a.seq_len) * tokens_per_s
                             / (a.peak_tflops * 1e12), 4)
        extra["peak_tflops"] = a.peak_tflops
    if a.device == "cuda":
        extra["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
        extra["gpu"] = torch.cuda.get_device_name(dev)
    print(json.dumps({
        "ms_per_step": round(ms, 3),
        "ms_per_step_median": round(sorted(times)[len(times) // 2], 3) if times else 0.0,
        "ms_per_step_min": round(min(times), 3) if times else 0.0,
        "cpu_ms_per_step": round(sum(cpu) / max(1, len(cpu)), 3),
        "tokens_per_s": round(tokens_per_s, 1),
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
    main()
