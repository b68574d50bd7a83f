#!/usr/bin/env bash
# Checks the PyTorch reference (bench/torch_ref.py) itself, before the C trainer is compared
# to it: (a) autograd gradients equal central finite differences in float64 on tiny MoE models
# (k = 1 and 2, capacity small enough that choices are dropped, aux and z losses on, a partial
# routing group, dense and MoE blocks); (b) a hand-made router case with known choices, gates,
# slots and drops, and the vectorised router against a plain per-token loop; (c) the optimizer
# step, gradient accumulation and the CLI (init/train/eval/grad, safetensors round trip).
# Environment (from CTest): PYTHON (Debian python3 with torch), TED_ROOT, TED_TMP.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
TED_ROOT=${TED_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
TED_TMP=${TED_TMP:-/tmp/ted_test_torch_ref_selfcheck}
mkdir -p "$TED_TMP"
cd "$TED_TMP"
REF="$TED_ROOT/bench/torch_ref.py"

# A small deterministic text file (the reference reads bytes).
"$PYTHON" - <<'EOF'
import random
r = random.Random(7)
words = "the whale ship sea captain ahab ishmael harpoon white deep boat oil".split()
text = " ".join(r.choice(words) for _ in range(3000)) + "\n"
open("corpus.txt", "w").write(text)
EOF

# Two tiny checkpoints written by the reference's own initialiser (perturbed biases/LN so
# their gradients are not trivially zero): k = 2 with every block MoE, k = 1 with dense + MoE.
"$PYTHON" "$REF" init --out ck_k2 --seed 1 --perturb 0.1 --n-positions 16 --n-embd 8 \
  --n-layer 2 --n-head 2 --n-inner 16 --num-experts 4 --top-k 2 --moe-every 1 \
  --capacity-factor 0.5 --min-capacity 1 --group-size 2 --aux-coef 0.1 --z-coef 0.01 \
  --seq-len 8 >/dev/null
"$PYTHON" "$REF" init --out ck_k1 --seed 2 --perturb 0.1 --n-positions 16 --n-embd 8 \
  --n-layer 2 --n-head 2 --n-inner 16 --num-experts 3 --top-k 1 --moe-every 2 \
  --capacity-factor 0.75 --min-capacity 1 --group-size 2 --aux-coef 0.1 --z-coef 0.01 \
  --seq-len 8 >/dev/null

TED_REF="$REF" "$PYTHON" - <<'EOF'
import importlib.util, json, math, os, random, subprocess, sys
import torch

spec = importlib.util.spec_from_file_location("torch_ref", os.environ["TED_REF"])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
torch.manual_seed(0)
failures = []

def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)

# ---------------------------------------------------------------------------------------
# (b) the router on a hand-made case: 1 group, S = 4 tokens, E = 3
# ---------------------------------------------------------------------------------------
logits = torch.tensor([[2.0, 1.0, 0.0],    # t0: e0 then e1
                       [2.0, 2.0, 0.0],    # t1: tie e0/e1 -> e0 first, then e1
                       [0.0, 3.0, 1.0],    # t2: e1 then e2
                       [5.0, 0.0, 0.0]],   # t3: e0, then tie e1/e2 -> e1
                      dtype=torch.float64)
p = torch.softmax(logits, -1)

def cfg_for(E, k, cf, minc, gs=1):
    return ref.Config(n_positions=4, n_embd=4, n_layer=1, n_head=1, num_experts=E, top_k=k,
                      moe_every=1, capacity_factor=cf, min_capacity=minc, group_size=gs,
                      seq_len=4)

# k = 2, capacity_factor 0.5: C = max(1, ceil(0.5*2*4/3)) = 2.
# First choices in token order: t0->e0 slot 0, t1->e0 slot 1, t2->e1 slot 0, t3->e0 full.
# Second choices:               t0->e1 slot 1, t1->e1 full,   t2->e2 slot 0, t3->e1 full.
cfg = cfg_for(3, 2, 0.5, 1)
check(ref.capacity(cfg, 4) == 2, "capacity k=2 cf=0.5 S=4 E=3 should be 2")
r = ref.route(logits, cfg, 1, 4)
check(r["experts"].tolist() == [[0, 1], [0, 1], [1, 2], [0, 1]], f"k=2 experts {r['experts'].tolist()}")
check(r["slot"].tolist() == [[0, 1], [1, -1], [0, 0], [-1, -1]], f"k=2 slots {r['slot'].tolist()}")
check(r["dropped"] == 3, "k=2 dropped count")
want_g = torch.stack([p[t, r["experts"][t]] / p[t, r["experts"][t]].sum() for t in range(4)])
check(torch.allclose(r["gates"], want_g, atol=1e-15), "k=2 gates renormalised over the chosen")
# f counts choices before dropping: e0 3, e1 4, e2 1 out of k*S = 8.
f = torch.tensor([3, 4, 1], dtype=torch.float64) / 8
want_aux = 3 * (f * p.mean(0)).sum()
check(abs(float(r["aux_sum"]) - float(want_aux)) < 1e-14, "k=2 aux loss")
want_z = sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in logits.tolist())
check(abs(float(r["z_sum"]) - want_z) < 1e-12, "z loss sum")

# k = 1, min_capacity 1, cf 0.5: C = max(1, ceil(0.5*1*4/3)) = 1: t0->e0, t1->e0 dropped,
# t2->e1, t3->e0 dropped. Gates are the raw p.
cfg = cfg_for(3, 1, 0.5, 1)
r = ref.route(logits, cfg, 1, 4)
check(r["experts"].tolist() == [[0], [0], [1], [0]], "k=1 experts")
check(r["slot"].tolist() == [[0], [-1], [0], [-1]], f"k=1 slots {r['slot'].tolist()}")
check(torch.allclose(r["gates"][:, 0], p.max(-1).values, atol=1e-15), "k=1 gates = p")
f = torch.tensor([3, 1, 0], dtype=torch.float64) / 4
check(abs(float(r["aux_sum"]) - float(3 * (f * p.mean(0)).sum())) < 1e-14, "k=1 aux loss")

# min_capacity binding, and C <= S; dropless keeps everything.
check(ref.capacity(cfg_for(3, 1, 0.5, 3), 4) == 3, "min_capacity binds")
check(ref.capacity(cfg_for(3, 1, 0.5, 9), 4) == 4, "C <= S")
check(ref.capacity(cfg_for(2, 2, 1.25, 1), 4) == 4, "C = ceil(1.25*2*4/2) = 5 capped to S = 4")
check(ref.capacity(cfg_for(2, 2, 1.1, 1), 10) == 10, "C = ceil(1.1*2*10/2) = 11 capped to S = 10")
check(ref.capacity(cfg_for(4, 2, 1.1, 1), 20) == 11, "C = ceil(1.1*2*20/4) = 11 exactly (not 12)")
check(ref.capacity(cfg_for(3, 3, 0.7, 1), 10) == 7, "C = ceil(0.7*3*10/3) = 7 exactly")
check(ref.capacity(cfg_for(3, 1, 0.3, 1), 10) == 1, "C = ceil(0.3*10/3) = 1 exactly")
r = ref.route(logits, cfg_for(3, 2, 0.0, 1), 1, 4)
check(r["dropped"] == 0 and r["slot"].tolist() == [[0, 1], [1, 2], [0, 0], [2, 3]],
      f"dropless slots {r['slot'].tolist()}")

# Ties in the top-k: lower index first, on many rows at once.
q = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 2.0, 2.0, 1.0], [3.0, 0.0, 3.0, 3.0]])
check(ref.top_k_first(q, 3).tolist() == [[0, 1, 2], [1, 2, 3], [0, 2, 3]], "top-k ties")

# The vectorised router against a plain per-token loop: random integer logits (many ties),
# several groups and a shorter last group (5 sequences, group_size 2).
def naive_route(logits, cfg, n_seq, T):
    E, k = cfg.num_experts, cfg.top_k
    pr = torch.softmax(logits, -1).tolist()
    experts, slots = [], []
    for row in pr:
        order = sorted(range(E), key=lambda e: (-row[e], e))
        experts.append(order[:k])
    slots = [[None] * k for _ in experts]
    for a in range(0, n_seq * T, cfg.group_size * T):
        b = min(a + cfg.group_size * T, n_seq * T)
        C = ref.capacity(cfg, b - a)
        fill = [0] * E
        for j in range(k):
            for t in range(a, b):
                e = experts[t][j]
                slots[t][j] = fill[e] if fill[e] < C else -1
                fill[e] += 1
    return experts, slots

for trial in range(40):
    E = random.Random(trial).choice([2, 3, 4, 8])
    k = random.Random(trial + 100).choice([1, 2, min(3, E)])
    cf = random.Random(trial + 200).choice([0.0, 0.5, 1.0, 1.25])
    cfg = cfg_for(E, k, cf, 1, gs=2)
    n_seq, T = 5, 6
    lg = torch.randint(-2, 3, (n_seq * T, E)).double()
    r = ref.route(lg, cfg, n_seq, T)
    ex, sl = naive_route(lg, cfg, n_seq, T)
    ok = r["experts"].tolist() == ex and r["slot"].tolist() == sl
    check(ok, f"router vs loop, trial {trial} (E {E} k {k} cf {cf})")

# ---------------------------------------------------------------------------------------
# (a) gradients against central finite differences, float64
# ---------------------------------------------------------------------------------------
def fd_check(ckpt, micro_batch, grad_accum, label):
    cfg, P = ref.load_checkpoint(ckpt, torch.float64)
    data = ref.SequentialData("corpus.txt", cfg.seq_len)
    mbs = data.micro_batches(3, micro_batch, grad_accum)
    n_tok = sum(x.numel() for x, _ in mbs)
    n_grp = sum(len(ref.group_bounds(x.shape[0], x.shape[1], cfg.group_size)) for x, _ in mbs)

    def loss_and_routes(P):
        loss, routes, dropped = 0.0, [], 0
        for x, y in mbs:
            s = ref.forward(P, cfg, x, y)
            loss = loss + s["lm_sum"] / n_tok + cfg.aux_coef * s["aux_sum"] / n_grp \
                + cfg.z_coef * s["z_sum"] / n_tok
            routes += [(e.tolist(), sl.tolist()) for e, sl in s["routes"]]
            dropped += s["dropped"]
        return loss, routes, dropped

    for t in P.values():
        t.requires_grad_(True)
    loss, routes, dropped = loss_and_routes(P)
    loss.backward()
    check(dropped > 0, f"{label}: the capacity should drop some choices")
    # step_loss (the trainer's path) gives the same loss and gradients
    G = {k: v.grad.clone() if v.grad is not None else torch.zeros_like(v) for k, v in P.items()}
    for t in P.values():
        t.grad = None
    r = ref.step_loss(P, cfg, mbs)
    check(abs(r["loss"] - float(loss)) < 1e-12, f"{label}: step_loss value")
    check(all(torch.allclose(P[k].grad, G[k], rtol=0, atol=1e-13) for k in P), f"{label}: step_loss grads")

    names = [n for n in P if any(s in n for s in (
        "router", "experts.0.c_fc.weight", "experts.1.c_proj.bias", "experts.2.c_fc.bias",
        "wte", "wpe", "c_attn.weight", "ln_2.weight", "ln_f.bias", "h.0.mlp.c_fc.weight",
        "h.1.attn.c_proj.bias", "ln_1.bias"))]
    h, checked, worst = 1e-5, 0, 0.0
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name in names:
            g = G[name].flatten()
            picks = [int(g.abs().argmax())] + torch.randint(0, g.numel(), (2,), generator=gen).tolist()
            for i in picks:
                flat = P[name].view(-1)
                old = float(flat[i])
                flat[i] = old + h
                lp, rp, _ = loss_and_routes(P)
                flat[i] = old - h
                lm, rm, _ = loss_and_routes(P)
                flat[i] = old
                if rp != routes or rm != routes:
                    continue          # the step moved a routing decision: FD not meaningful
                fd = (float(lp) - float(lm)) / (2 * h)
                err = abs(fd - float(g[i]))
                worst = max(worst, err / max(1e-3, abs(fd)))
                checked += 1
                check(err <= 1e-7 + 1e-5 * abs(fd),
                      f"{label}: {name}[{i}] autograd {float(g[i]):.10g} vs FD {fd:.10g}")
    check(checked >= 2 * len(names), f"{label}: too few elements checked ({checked})")
    check(any("router" in n for n in names), f"{label}: router not checked")
    print(f"{label}: {checked} elements, {len(names)} tensors, worst rel err {worst:.2e}, "
          f"dropped {dropped} choices")

# micro-batch 3 with group_size 2: each micro-step has a shorter last group.
fd_check("ck_k2", 3, 2, "k=2")
fd_check("ck_k1", 3, 2, "k=1")

# ---------------------------------------------------------------------------------------
# (c) gradient accumulation, the optimizer step, the CLI
# ---------------------------------------------------------------------------------------
# grad_accum 2 x micro 2 equals one micro-batch of 4 (groups of 2 sequences either way).
cfg, P = ref.load_checkpoint("ck_k2", torch.float64)
data = ref.SequentialData("corpus.txt", cfg.seq_len)
for t in P.values():
    t.requires_grad_(True)
r1 = ref.step_loss(P, cfg, data.micro_batches(1, 2, 2))
G1 = {k: v.grad.clone() for k, v in P.items()}
for t in P.values():
    t.grad = None
r2 = ref.step_loss(P, cfg, data.micro_batches(1, 4, 1))
check(abs(r1["loss"] - r2["loss"]) < 1e-12, "grad accumulation: loss")
check(all(torch.allclose(G1[k], P[k].grad, rtol=0, atol=1e-13) for k in P), "grad accumulation: grads")

# One training step by hand: the first AdamW step moves each weight by lr*g/(|g|+eps)
# (bias-corrected m/sqrt(v)), after decoupled decay lr*wd*w on >= 2-D tensors only, with
# g the clipped gradient.
cfg, P0 = ref.load_checkpoint("ck_k2", torch.float64)
cfg, P = ref.load_checkpoint("ck_k2", torch.float64)
for t in P0.values():
    t.requires_grad_(True)
ref.step_loss(P0, cfg, data.micro_batches(0, 2, 2))
norm = math.sqrt(sum(float((t.grad ** 2).sum()) for t in P0.values()))
clip, lr, wd = 0.5 * norm, 1e-3, 0.1
scale = clip / (norm + 1e-6)
hist = ref.train(P, cfg, data, 3, 2, 2, lr, 1e-4, 2, wd, clip)
check(abs(hist["grad_norm"][0] - norm) < 1e-12, "train: grad norm reported before clipping")
check(hist["lr"][:3] == [lr / 2, lr, 1e-4 + 0.5 * (lr - 1e-4) * (1 + math.cos(math.pi * 0 / 1))],
      f"train: lr schedule {hist['lr']}")
cfg, P1 = ref.load_checkpoint("ck_k2", torch.float64)
hist1 = ref.train(P1, cfg, data, 1, 2, 2, lr, lr, 1, wd, clip)
for k, w in P0.items():
    g = w.grad * scale
    want = w.detach() * (1 - lr * wd * (w.dim() >= 2)) - lr * g / (g.abs() + 1e-8)
    if not torch.allclose(P1[k].detach(), want, rtol=0, atol=1e-12):
        check(False, f"train: first AdamW step of {k}")
        break

# The CLI end to end, and safetensors written by it read back.
def run(*args):
    out = subprocess.run([sys.executable, os.environ["TED_REF"], *args], check=True,
                         capture_output=True, text=True)
    return out.stdout

run("train", "--init", "ck_k2", "--data", "corpus.txt", "--steps", "3", "--micro-batch", "2",
    "--grad-accum", "2", "--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "2",
    "--weight-decay", "0.1", "--clip", str(clip), "--out", "train.json", "--save", "ck_trained")
tj = json.load(open("train.json"))
check(sorted(tj) == sorted(["step", "loss", "lm_loss", "aux_loss", "grad_norm", "lr"]), "train.json keys")
check(tj["step"] == [0, 1, 2] and all(abs(a - b) < 1e-12 for a, b in zip(tj["loss"], hist["loss"])),
      "CLI train matches train()")
cfg2, Pt = ref.load_checkpoint("ck_trained", torch.float32)
check(all(torch.equal(Pt[k], P[k].detach().float()) for k in P), "saved weights round trip")
check(json.load(open("ck_trained/config.json")) == json.load(open("ck_k2/config.json")), "config round trip")
ev = json.loads(run("eval", "--init", "ck_k2", "--data", "corpus.txt", "--windows", "4"))
check(ev["windows"] == 4 and abs(ev["loss"] - ev["lm_loss"] - ev["aux_loss"]) < 1e-12, "eval output")
gj = json.loads(run("grad", "--init", "ck_k2", "--data", "corpus.txt", "--batch", "4", "--out", "g.safetensors"))
G = ref.st_read("g.safetensors")
check(set(G) == set(P1), "grad file names")
cfg, P = ref.load_checkpoint("ck_k2", torch.float64)
for t in P.values():
    t.requires_grad_(True)
r0 = ref.step_loss(P, cfg, data.micro_batches(0, 4, 1))
check(abs(gj["loss"] - r0["loss"]) < 1e-12, "grad CLI loss = step-0 loss")
check(all(torch.equal(G[k], P[k].grad.float()) for k in G), "grad CLI = step-0 gradient")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("torch_ref self-check: all passed")
EOF
