#!/usr/bin/env python3
"""gpu_table.py DIR - the table of bench/gpu_bench.sh from the logs it left in DIR (standard library
only): per shape ted's ms/step (ted bench: the mean of its timed steps) against eager PyTorch's
(bench/torch_bench.py: the median of its timed steps), ted's speed over PyTorch's, both MFUs and
device memory peaks; then T 8192 at micro-batch 1, ted's device peak against `ted plan`'s figure;
then MoE 4 K with the experts' GEMM classes timed (TED_LT_TUNE=1) against the run without; then
TED_GPU_PROF's line per shape as a table (GPU ms per step by kind, launches, host syncs), and
with TED_GPU_PROF=2 the slowest sites (ops, GEMM shapes) of the MoE 4 K run. A run that failed or
never ran shows its log's last line instead of figures."""

import json
import os
import re
import sys

SHAPES = [("moe4k", "MoE dropless, 4 K tokens/step"), ("dense4k", "dense, 4 K tokens/step"),
          ("moe16k", "MoE dropless, 16 K tokens/step")]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def result(lines, key):
    """The last JSON object of the log with key at its top level (not the gpu_prof line's), or None."""
    for line in reversed(lines):
        if line.startswith("{") and key in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if key in obj:
                return obj
    return None


def last_line(lines):
    rest = [x for x in lines if x.strip()]
    return rest[-1][:100] if rest else "did not run"


def gb(x):
    return f"{x / 1e9:.1f}"


def row(d, name, label):
    tl, pl = read(os.path.join(d, f"ted_{name}.txt")), read(os.path.join(d, f"torch_{name}.txt"))
    t, p = result(tl, "ms_per_step"), result(pl, "ms_per_step")
    cells = [label]
    cells.append(f"{t['ms_per_step']:.1f}" if t else last_line(tl))
    cells.append(f"{p['ms_per_step_median']:.1f}" if p else last_line(pl))
    cells.append(f"{p['ms_per_step_median'] / t['ms_per_step']:.2f}x" if t and p else "-")
    cells.append(f"{t['mfu']:.3f}" if t else "-")
    cells.append(f"{p.get('mfu_median', 0):.3f}" if p else "-")
    cells.append(gb(t["device_bytes_peak"]) if t else "-")
    cells.append(gb(p["peak_mem_gib"] * 2**30) if p else "-")
    return "| " + " | ".join(cells) + " |", p


def plan_bytes(lines):
    """ted plan --config's one-GPU row: model state + activations, in bytes (None if not found)."""
    for line in lines:
        m = re.search(r"tp 1\s+ep 1\s+dp 1\s+edp 1\s+(\d+) bytes.*?activations (\d+) bytes", line)
        if m:
            return int(m.group(1)) + int(m.group(2))
    return None


def long_context(d):
    tl = read(os.path.join(d, "ted_t8192.txt"))
    t, plan = result(tl, "ms_per_step"), plan_bytes(read(os.path.join(d, "plan_t8192.txt")))
    if not t:
        return f"T 8192, micro-batch 1 (MoE dropless): {last_line(tl)}" + \
            (f"; ted plan {gb(plan)} GB" if plan else "")
    s = f"T 8192, micro-batch 1 (MoE dropless): ted {t['ms_per_step']:.1f} ms/step, device peak {gb(t['device_bytes_peak'])} GB"
    if plan:
        s += f"; ted plan {gb(plan)} GB (peak / plan {t['device_bytes_peak'] / plan:.3f})"
    return s


def variant(d, name, label, other):
    """The head of an extra MoE 4 K run's line (ted_<name>.txt): its ms a step against the plain
    run's (labelled `other`), and its log lines (None when it failed); (None, None) when it did not run."""
    lines = read(os.path.join(d, f"ted_{name}.txt"))
    if not lines:
        return None, None
    t, base = result(lines, "ms_per_step"), result(read(os.path.join(d, "ted_moe4k.txt")), "ms_per_step")
    if not t:
        return f"MoE 4 K, {label}: {last_line(lines)}", None
    s = f"MoE 4 K, {label}: ted {t['ms_per_step']:.1f} ms/step"
    return s + (f" ({other}: {base['ms_per_step']:.1f})" if base else ""), lines


def prof_ms(lines):
    """TED_GPU_PROF's ms a step by kind in a run's log lines ({} when none)."""
    return ((result(lines, "gpu_prof") or {}).get("gpu_prof") or {}).get("ms_per_step", {})


def lt_line(d):
    """MoE 4 K with the experts' GEMM classes timed (TED_LT_TUNE=1, after 15 untimed steps) against
    the run without, and what the timing found (TED_GPU_PROF's lt counts); None when it did not run."""
    s, lines = variant(d, "moe4k_lt", "TED_LT_TUNE=1 (15 untimed steps first)", "without")
    if not lines:
        return s
    if prof_ms(lines).get("gemm") is not None:
        s += f"; gemm {prof_ms(lines)['gemm']:.1f} ms"
    lt = ((result(lines, "gpu_prof") or {}).get("gpu_prof") or {}).get("lt")
    if lt:
        s += f"; {lt['classes_timed']} classes timed, another candidate won {lt['another_won']}"
    return s


def gelu_line(d):
    """MoE 4 K with GELU by its own passes (TED_LT_GELU=0) against the run with cuBLASLt's GELU
    epilogues: ms a step, and the gemm and norm_elementwise kinds; None when it did not run."""
    s, lines = variant(d, "moe4k_gelu0", "TED_LT_GELU=0 (GELU's own passes)", "with the epilogues")
    if not lines:
        return s
    ms = [prof_ms(lines), prof_ms(read(os.path.join(d, "ted_moe4k.txt")))]
    for kind in ("gemm", "norm_elementwise"):
        if ms[0].get(kind) is not None and ms[1].get(kind) is not None:
            s += f"; {kind} {ms[0][kind]:.1f} / {ms[1][kind]:.1f} ms"
    return s


def overlap_line(d):
    """MoE 4 K with AdamW beside the next step's forward (TED_OPT_OVERLAP=1) against the step in one
    launch: ms a step; None when it did not run."""
    return variant(d, "moe4k_overlap", "TED_OPT_OVERLAP=1 (AdamW beside the next forward)", "in one launch")[0]


def prof_lines(d):
    """TED_GPU_PROF=1's JSON line per shape as a table: ms per step by kind, launches, host syncs."""
    out, kinds = [], None
    for name, _ in SHAPES + [("t8192", "")]:
        js = (result(read(os.path.join(d, f"ted_{name}.txt")), "gpu_prof") or {}).get("gpu_prof")
        if not js:
            continue
        ms = js["ms_per_step"]
        if kinds is None:
            kinds = [k for k in ms if k != "total"]
            out.append("| shape | " + " | ".join(kinds) + " | total ms | launches | host syncs |")
            out.append("|---" * (len(kinds) + 4) + "|")
        cells = [name] + [f"{ms.get(k, 0):.1f}" for k in kinds] + [f"{ms['total']:.1f}",
                 f"{js['launches_per_step']['total']:.0f}", f"{js['host_syncs_per_step']:.0f}"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def slowest_sites(d, name="sites_moe4k", n=20):
    """TED_GPU_PROF=2's site lines of one run, the n slowest (they come slowest first) as a table."""
    sites = []
    for line in read(os.path.join(d, f"ted_{name}.txt")):
        if line.startswith('{"gpu_prof_site"'):
            try:
                sites.append(json.loads(line)["gpu_prof_site"])
            except (ValueError, KeyError):
                continue
    if not sites:
        return []
    out = [f"ted TED_GPU_PROF=2, the {min(n, len(sites))} slowest of {len(sites)} sites at {name}:",
           "| site | kind | ms/step | calls/step | TFLOP/s |", "|---|---|---|---|---|"]
    for t in sites[:n]:
        tf = f"{t['tflops']:.0f}" if "tflops" in t else "-"
        out.append(f"| {t['site']} | {t['kind']} | {t['ms_per_step']:.2f} | {t['calls_per_step']:.1f} | {tf} |")
    return out


def main():
    d = sys.argv[1]
    card = [x for x in read(os.path.join(d, "card.txt")) if x.strip()]
    rows, torch_run = [], None
    for name, label in SHAPES:
        r, p = row(d, name, label)
        rows.append(r)
        torch_run = torch_run or p
    head = f"card: {card[-1] if card else 'unknown'}"
    if torch_run:
        head += (f"; PyTorch {torch_run.get('torch')}: bf16 {torch_run.get('matmul_n', 8192)}^3 matmul "
                 f"{torch_run.get('matmul_bf16_tflops', 0):.0f} TFLOP/s; MFU against {torch_run.get('peak_tflops', 0)} TFLOP/s")
    print(head)
    print("| shape | ted ms/step (mean) | PyTorch ms/step (median) | ted speed / PyTorch | ted MFU | PyTorch MFU "
          "| ted GB | PyTorch GB |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(long_context(d))
    for extra in (gelu_line(d), overlap_line(d), lt_line(d)):
        if extra:
            print(extra)
    prof = prof_lines(d)
    print("ted TED_GPU_PROF=1, GPU ms per step by kind:" if prof else "ted TED_GPU_PROF=1: no gpu_prof lines in ted's output")
    for line in prof + slowest_sites(d):
        print(line)


if __name__ == "__main__":
    main()
