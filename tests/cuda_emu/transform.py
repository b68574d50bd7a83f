#!/usr/bin/env python3
"""transform.py OUTDIR FILE... — turns CUDA sources into C++ for the CPU emulation (emu.h).

For each X.cu: OUTDIR/X.cpp, which includes emu.h, then the source with every launch
    kernel<<<grid, block[, shmem[, stream]]>>>(args)
rewritten as
    emu_launch<SYNC>("kernel", grid, block, shmem, stream, [](auto... p_) { kernel(p_...); }, args)
where SYNC says whether the kernel, or a __device__ function it calls (transitively), uses a
barrier, a warp shuffle, a vote or a wmma operation (then its threads run as fibers; else as a
loop). A launch with dynamic shared memory (a shmem value other than 0) becomes
    emu_launch_dynamic<SYNC>("kernel", (const void *)&kernel<targs>, grid, block, shmem, stream, ...)
so that the emulation checks the size against the kernel's attribute, and a kernel's
    extern __shared__ T name[];
becomes `T *name = (T *)emu_dynamic_shared();` (declare it inside the kernel).
For each X.cuh (device code the .cu files share): OUTDIR/X.cuh, its launches rewritten the same
way; a kernel of a .cu that calls a __device__ function of a .cuh that synchronises counts as
synchronising too. For each X.h: OUTDIR/X.h with `#ifdef __CUDACC__` blocks switched on (the
C++ side of the interface that the .cu files see). Line numbers are kept (#line), so that compiler messages
point into the original file. Python 3, standard library only.
"""
import os
import re
import sys

SYNC_PRIMITIVES = re.compile(r"\b(__syncthreads|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|"
                             r"load_matrix_sync|store_matrix_sync|mma_sync|emu_mma_bf16_16816|emu_ldmatrix)\b")
DYNAMIC_SHARED = re.compile(r"\bextern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)"
                            r"\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_]\w*)\s*\[\s*\]\s*;")


def blank_comments_and_strings(src):
    """src with comments and string/char literals replaced by spaces (same offsets)."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def matching(text, i, open_ch, close_ch):
    """index of the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit(f"transform.py: unbalanced {open_ch}{close_ch} at offset {i}")


def split_top_level(text):
    """text split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def device_functions(code):
    """[(name, is_kernel, body)] of the __global__ / __device__ functions defined in code."""
    found = []
    for m in re.finditer(r"\b(__global__|__device__)\b", code):
        paren = code.find("(", m.end())
        semi, brace = code.find(";", m.end()), code.find("{", m.end())
        if paren < 0 or brace < 0 or (0 <= semi < brace and semi < paren):
            continue   # a declaration or a __device__ variable
        head = code[m.end():paren]
        while re.search(r"\b__launch_bounds__\s*$", head):   # its arguments are not the parameters
            paren = code.find("(", matching(code, paren, "(", ")"))
            head = code[m.end():paren]
        if re.search(r"\boperator\s*$", head):   # operator()(...)
            paren = code.find("(", paren + 1)
            name = "operator()"
        else:
            name = re.findall(r"\w+", head)[-1]
        close = matching(code, paren, "(", ")")
        brace = code.find("{", close)
        semi = code.find(";", close)
        if brace < 0 or 0 <= semi < brace:
            continue
        found.append((name, m.group(1) == "__global__", code[brace:matching(code, brace, "{", "}") + 1]))
    return found


def sync_kernels(code):
    """{kernel name: uses a barrier} for the kernels defined in code."""
    funcs = device_functions(code)
    # macros that expand to a primitive count as functions that synchronise
    syncing = {m.group(1) for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:.*\\\n)*.*)$", code, re.M)
               if SYNC_PRIMITIVES.search(m.group(2))}
    changed = True
    while changed:   # functions that reach a primitive through calls
        changed = False
        for name, _, body in funcs:
            if name in syncing:
                continue
            calls = SYNC_PRIMITIVES.search(body) or any(
                re.search(r"\b" + re.escape(s) + r"\b", body) for s in syncing if s != "operator()")
            if calls:
                syncing.add(name)
                changed = True
    functor_syncs = "operator()" in syncing   # a functor argument may then synchronise
    result = {}
    for name, is_kernel, body in funcs:
        if is_kernel:
            result[name] = name in syncing or functor_syncs
    return result


LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(<[^<>;(){}]*>)?\s*<<<")


def transform_cu(src, path, shared=""):
    """src with its launches rewritten; shared: the (blanked) code of the .cuh files, whose
    __device__ functions the kernels of src may call."""
    code = blank_comments_and_strings(src)
    sync = sync_kernels(code + "\n" + shared)
    out, pos = [], 0
    for m in LAUNCH.finditer(code):
        if m.start() < pos:
            continue
        name, targs = m.group(1), m.group(2) or ""
        cfg_end = code.find(">>>", m.end())
        paren = cfg_end + 3
        while code[paren].isspace():
            paren += 1
        if code[paren] != "(":
            raise SystemExit(f"{path}: launch of {name} without an argument list")
        close = matching(code, paren, "(", ")")
        cfg = split_top_level(src[m.end():cfg_end])
        if not 2 <= len(cfg) <= 4:
            raise SystemExit(f"{path}: launch of {name}: {len(cfg)} configuration values")
        cfg += ["0"] * (4 - len(cfg))
        if name not in sync:
            raise SystemExit(f"{path}: launch of {name}, which is not a __global__ function defined in this file")
        args = src[paren + 1:close]
        sep = ", " if args.strip() else ""
        out.append(src[pos:m.start()])
        flag = "true" if sync[name] else "false"
        if cfg[2].strip() == "0":
            out.append(f'emu_launch<{flag}>("{name}", ')
        else:
            out.append(f'emu_launch_dynamic<{flag}>("{name}", (const void *)&{name}{targs}, ')
        out.append(f'{", ".join(c.strip() for c in cfg)}, [](auto... p_) {{ {name}{targs}(p_...); }}{sep}{args})')
        pos = close + 1
    out.append(src[pos:])
    return DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)} *{m.group(2)} = ({m.group(1)} *)emu_dynamic_shared();",
                              "".join(out))


def transform_h(src):
    src = re.sub(r"^\s*#\s*ifdef\s+__CUDACC__\b", "#if 1 /* __CUDACC__: emulated */", src, flags=re.M)
    src = re.sub(r"^\s*#\s*ifndef\s+__CUDACC__\b", "#if 0 /* !__CUDACC__ */", src, flags=re.M)
    return re.sub(r"defined\s*\(?\s*__CUDACC__\s*\)?", "1", src)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    shared = "\n".join(blank_comments_and_strings(open(p, encoding="utf-8").read())
                       for p in sys.argv[2:] if p.endswith(".cuh"))
    for path in sys.argv[2:]:
        src = open(path, encoding="utf-8").read()
        base, ext = os.path.splitext(os.path.basename(path))
        line = f'#line 1 "{os.path.abspath(path)}"\n'
        if ext == ".cu":
            text = f'// generated from {path} by tests/cuda_emu/transform.py\n#include "emu.h"\n{line}'
            text += transform_cu(src, path, shared)
            out = os.path.join(outdir, base + ".cpp")
        elif ext == ".cuh":
            text = f"// generated from {path} by tests/cuda_emu/transform.py\n{line}" + transform_cu(src, path, shared)
            out = os.path.join(outdir, base + ext)
        else:
            text = f"// generated from {path} by tests/cuda_emu/transform.py\n{line}" + transform_h(src)
            out = os.path.join(outdir, base + ext)
        if not os.path.exists(out) or open(out, encoding="utf-8").read() != text:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            os.utime(out)   # up to date for make


if __name__ == "__main__":
    main()
