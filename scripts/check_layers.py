#!/usr/bin/env python3
"""check_layers.py [SRC] — the include rules of src/ (src/README.md), checked.

src/ is cut into rooms, one folder each, in an order from the bottom up (ROOMS below). A file
may include the headers of its own room and of the rooms below it, never of a room above it,
and an include names the room ("moe/router.h"), or a header beside the file ("cuda_ops.h"). A module is one name in one room (its .c, .h,
.cu and .cuh together); the modules' includes must form no circle, inside a room or across rooms.
Prints one line per broken rule, naming the files, and exits 1; prints one summary line and
exits 0 when the tree keeps every rule. Python 3, standard library only.
"""
import os
import re
import sys

# bottom first: a room may include itself and what stands before it
ROOMS = ["core", "config", "nn", "parallel", "moe", "model", "io", "perf", "run", "cli", "cuda"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".c", ".h", ".cu", ".cuh")


def read_tree(src):
    """{relative path: [included paths as written]} for every source under src/, and errors."""
    files, errors = {}, []
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if os.path.isfile(path) and name.endswith(SOURCES):
            errors.append(f"src/{name}: a source file outside the rooms (put it in one of {', '.join(ROOMS)})")
        if not os.path.isdir(path):
            continue
        if name not in ROOMS:
            errors.append(f"src/{name}/: a folder that is not a room (give it a place in ROOMS of {sys.argv[0]})")
            continue
        for dirpath, _, names in os.walk(path):
            for f in sorted(names):
                if f.endswith(SOURCES):
                    rel = os.path.relpath(os.path.join(dirpath, f), src)
                    with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                        files[rel] = INCLUDE.findall(fh.read())
    return files, errors


def module(rel):
    room, name = rel.split(os.sep, 1)[0], os.path.splitext(os.path.basename(rel))[0]
    return f"{room}/{name}"


def check_includes(files):
    """Every include names an existing header by its room, from a room at or above it."""
    errors, edges = [], {}
    for rel, incs in files.items():
        room = rel.split(os.sep, 1)[0]
        for inc in incs:
            target = os.path.normpath(inc)
            beside = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if "/" not in inc and beside in files:
                target = beside    # a header beside the file, in its own room
            if target not in files:
                errors.append(f"src/{rel}: includes \"{inc}\", which is no header of a room "
                              f"(name it as \"room/name.h\")")
                continue
            troom = target.split(os.sep, 1)[0]
            if ROOMS.index(troom) > ROOMS.index(room):
                errors.append(f"src/{rel}: includes \"{inc}\": room {room} may not include room {troom}, "
                              f"which stands above it ({' < '.join(ROOMS)})")
            a, b = module(rel), module(target)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, (rel, inc))
    return errors, edges


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan), each as a list."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def shortest_ring(edges, comp):
    """The shortest walk comp[0] -> ... -> comp[0] inside the component (breadth first)."""
    start, inside = comp[0], set(comp)
    prev, queue = {}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, {})):
            if w == start:
                ring = [v]
                while ring[-1] != start:
                    ring.append(prev[ring[-1]])
                return [start] + ring[::-1][1:] + [start] if v != start else [start, start]
            if w in inside and w not in prev:
                prev[w] = v
                queue.append(w)
    return [start, start]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    files, errors = read_tree(src)
    inc_errors, edges = check_includes(files)
    errors += inc_errors
    for comp in cycles(edges):
        ring = shortest_ring(edges, comp)
        ties = [f"src/{edges[a][b][0]} includes \"{edges[a][b][1]}\"" for a, b in zip(ring, ring[1:])]
        errors.append(f"include circle among {', '.join(comp)}: " + " -> ".join(ties))
    for e in errors:
        print(f"check_layers: {e}")
    if errors:
        return 1
    n = sum(len(v) for v in files.values())
    print(f"check_layers: {len(files)} files, {n} includes, {len(ROOMS)} rooms: every include points down, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
