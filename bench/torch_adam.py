#!/usr/bin/env python3
"""torch.optim.AdamW (foreach=True) over N parameters, the counterpart of `ted bench --optimizer N`.

Run with Debian's python3 (it has torch):  /usr/bin/python3 bench/torch_adam.py 50000000 [threads]
The N parameters are split into 100 tensors (a model's worth of foreach work). Prints the best of
10 steps in ms and GB/s with the byte counts ted uses (28 bytes per element: gradient, weight,
m, v read; weight, m, v written). With bf16 weights torch keeps m and v in bf16 too (14 bytes per
element, also printed); ted keeps fp32 masters, m and v next to bf16 weights.
"""
import sys
import time

import torch


def best_step_ms(dtype, n, parts=100, reps=10):
    size = n // parts
    params = [torch.full((size,), 0.02, dtype=dtype, requires_grad=True) for _ in range(parts)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True)
    opt.step()   # states allocated
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        opt.step()
        best = min(best, (time.perf_counter() - t) * 1e3)
    return best


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000
    if len(sys.argv) > 2:
        torch.set_num_threads(int(sys.argv[2]))
    print(f"torch {torch.__version__} AdamW(foreach=True) over {n} parameters, {torch.get_num_threads()} threads (best of 10):")
    for name, dtype, counted in (("fp32", torch.float32, 28), ("bf16", torch.bfloat16, 14)):
        ms = best_step_ms(dtype, n)
        print(f"  {name} AdamW {ms:8.2f} ms   {counted * n / ms * 1e-6:6.1f} GB/s ({counted} bytes per element)")


if __name__ == "__main__":
    main()
