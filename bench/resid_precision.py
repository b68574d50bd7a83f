#!/usr/bin/env python3
"""resid_precision.py - what a bf16 residual stream costs in loss, against an fp32 one.

ted keeps the residual stream (the block inputs and the sum after attention) in fp32 on a --bf16
GPU run, as eager PyTorch under autocast does (fp32 embeddings plus bf16 branch outputs promote to
fp32); Megatron-LM rounds it to bf16 unless --fp32-residual-connection. This trains the same
small MoE model twice per seed under torch.autocast(bfloat16) - bf16 GEMMs, fp32 weights, AdamW,
router and LayerNorm statistics - once with the residual stream in fp32 and once rounded to bf16
after every add, and prints the validation loss of each (the model's own forward, the held-out
10 % of the data, the bytes as tokens) and the bf16 run's gap to the fp32 one. Nothing else
differs: the same initial weights and batches.

    /usr/bin/python3 bench/resid_precision.py [--data data/moby-dick.txt] [--steps 300]
        [--seeds 1,2,3] [--n-layer 4] [--n-embd 64] [--n-inner 256] [--seq-len 64] [--batch 8]
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402
import torch_ref as ref  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/moby-dick.txt")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-inner", type=int, default=256)
    ap.add_argument("--num-experts", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="default: os.cpu_count()")
    return ap.parse_args()


def val_loss(P, cfg, val, n, resid):
    """The mean loss over the first n windows of the held-out split, as the run computes it."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ws = torch.stack([val.window(i) for i in range(min(n, val.nwin))])
        return sum(float(tb.fast_loss(P, cfg, w[None, :-1], w[None, 1:], resid)) for w in ws) / len(ws)


def run(a, cfg, seed, resid, data, val):
    P = ref.init_params(cfg, seed=seed, dtype=torch.float32)
    for t in P.values():
        t.requires_grad_(True)
    opt = ref.make_optimizer(P, a.lr, 0.1)
    params = list(P.values())
    for s in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = ref.lr_at(s, a.steps, a.lr, a.lr / 10, a.steps // 10)
        opt.zero_grad(set_to_none=True)
        (x, y), = data.micro_batches(s + seed * 1000, a.batch, 1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = tb.fast_loss(P, cfg, x, y, resid)
        loss.backward()
        for t in params:
            if t.grad is None:
                t.grad = torch.zeros_like(t)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return float(loss), val_loss(P, cfg, val, a.eval_windows, resid)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads or os.cpu_count())
    cfg = ref.Config(vocab_size=256, n_positions=a.seq_len, n_embd=a.n_embd, n_layer=a.n_layer,
                     n_head=a.n_head, n_inner=a.n_inner, num_experts=a.num_experts, top_k=2,
                     moe_every=2, capacity_factor=0.0, group_size=1, seq_len=a.seq_len)
    data = ref.SequentialData(a.data, a.seq_len)
    val = ref.SequentialData(a.data, a.seq_len, split="val")
    gaps = []
    for seed in (int(s) for s in a.seeds.split(",")):
        out = {}
        for name, resid in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            out[name] = run(a, cfg, seed, resid, data, val)
        gap = (out["bf16"][1] - out["fp32"][1]) / out["fp32"][1]
        gaps.append(gap)
        print(json.dumps({"seed": seed, "val_loss_fp32_resid": round(out["fp32"][1], 5),
                          "val_loss_bf16_resid": round(out["bf16"][1], 5), "gap": round(gap, 5),
                          "last_train_loss": {k: round(v[0], 4) for k, v in out.items()}}), flush=True)
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / max(1, len(gaps) - 1))
    print(json.dumps({"steps": a.steps, "seeds": len(gaps), "mean_gap": round(mean, 5), "sd_gap": round(sd, 5),
                      "shape": {"n_layer": a.n_layer, "n_embd": a.n_embd, "n_inner": a.n_inner,
                                "num_experts": a.num_experts, "seq_len": a.seq_len, "batch": a.batch}}))


if __name__ == "__main__":
    sys.exit(main())
