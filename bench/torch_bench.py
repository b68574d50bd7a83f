#!/usr/bin/env python3
"""torch_bench.py - the eager-PyTorch speed baseline for `ted bench`.

Builds the model of the bench shape (by default B 8, T 256, d 256, L 4, 4 heads, f 1024,
8 experts top-2 in every block, V 256, capacity_factor 1.0, group_size 1) with the reference
model code of bench/torch_ref.py (an eager MoE: per expert index_select, FFN, index_add),
feeds random tokens, runs warm-up steps, then times full training steps in float32 —
forward, backward, global-norm clipping and the AdamW step — on all the machine's cores.
Prints one JSON object: ms_per_step (mean over the timed steps), tokens_per_s, threads, torch,
plus the median and minimum step times and the shape used. The timings are wall-clock: on a
machine shared with other work they include its interference (use the median/min to judge).
On an oversubscribed machine OMP_WAIT_POLICY=PASSIVE in the environment helps torch's OpenMP
a lot (2-3x here with other jobs running); the policy in effect is printed.

    /usr/bin/python3 bench/torch_bench.py [--steps 10] [--warmup 3] [--batch 8] [--seq-len 256]
        [--n-embd 256] [--n-layer 4] [--n-head 4] [--n-inner 1024] [--num-experts 8] [--top-k 2]
        [--moe-every 1] [--vocab-size 256] [--capacity-factor 1.0] [--group-size 1]
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref as ref  # noqa: E402


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
    a = ap.parse_args()

    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    cfg = ref.Config(vocab_size=a.vocab_size, n_positions=a.seq_len, n_embd=a.n_embd,
                     n_layer=a.n_layer, n_head=a.n_head, n_inner=a.n_inner,
                     num_experts=a.num_experts, top_k=a.top_k, moe_every=a.moe_every,
                     capacity_factor=a.capacity_factor, min_capacity=a.min_capacity,
                     group_size=a.group_size, seq_len=a.seq_len)
    P = ref.init_params(cfg, seed=a.seed, dtype=torch.float32)
    for t in P.values():
        t.requires_grad_(True)
    opt = ref.make_optimizer(P, 3e-4, 0.1, foreach=not a.no_foreach)
    g = torch.Generator().manual_seed(a.seed + 1)
    # a fresh random batch per step, drawn up front so that drawing it is not timed
    batches = [torch.randint(0, a.vocab_size, (a.batch, a.seq_len + 1), generator=g)
               for _ in range(a.warmup + a.steps)]

    def train_step(w):
        for t in P.values():
            t.grad = None
        ref.step_loss(P, cfg, [(w[:, :-1], w[:, 1:])])
        ref.clip_grads(P, 1.0)
        opt.step()

    for s in range(a.warmup):
        train_step(batches[s])
    times = []
    for s in range(a.warmup, a.warmup + a.steps):
        t0 = time.perf_counter()
        train_step(batches[s])
        times.append(1000 * (time.perf_counter() - t0))

    ms = sum(times) / max(1, len(times))
    print(json.dumps({
        "ms_per_step": round(ms, 3),
        "ms_per_step_median": round(sorted(times)[len(times) // 2], 3) if times else 0.0,
        "ms_per_step_min": round(min(times), 3) if times else 0.0,
        "tokens_per_s": round(a.batch * a.seq_len / (ms / 1000), 1),
        "threads": threads,
        "torch": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "steps": a.steps,
        "shape": {"batch": a.batch, "seq_len": a.seq_len, "n_embd": a.n_embd,
                  "n_layer": a.n_layer, "n_head": a.n_head, "n_inner": cfg.n_inner,
                  "num_experts": a.num_experts, "top_k": a.top_k, "moe_every": a.moe_every,
                  "vocab_size": a.vocab_size, "capacity_factor": a.capacity_factor,
                  "group_size": a.group_size},
    }))


if __name__ == "__main__":
    main()
