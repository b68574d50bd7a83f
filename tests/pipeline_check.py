# pipeline_check.py PREFIX PP: checks the instruction traces PREFIX.<stage> that a pipelined run
# wrote for its first step (TED_PP_TRACE) against the schedules' definitions, written here
# independently of src/parallel/schedule.c, and computes the ideal bubble from the recorded order
# (forward 1 unit per stage's share of the model, backward 2; transfers free).
import sys


def expected(kind, pp, v, m, s):
    """The (op, mb, chunk) compute order of stage s, by each schedule's definition."""
    if kind == "gpipe":
        return [("F", i, s) for i in range(m)] + [("B", i, s) for i in range(m)]
    if kind == "1f1b":
        w = min(pp - s - 1, m)
        out = [("F", i, s) for i in range(w)]
        for j in range(m - w):
            out += [("F", w + j, s), ("B", j, s)]
        return out + [("B", i, s) for i in range(m - w, m)]
    # interleaved (Megatron): k-th forward of chunk (k//pp)%v, k-th backward of chunk v-1-(k//pp)%v
    total = m * v
    w = total if m == pp else min((pp - s - 1) * 2 + (v - 1) * pp, total)
    mb = lambda k: (k // (pp * v)) * pp + k % pp
    fw = lambda k: ("F", mb(k), ((k // pp) % v) * pp + s)
    bw = lambda k: ("B", mb(k), (v - 1 - (k // pp) % v) * pp + s)
    out = [fw(k) for k in range(w)]
    for k in range(total - w):
        out += [fw(k + w), bw(k)]
    return out + [bw(k) for k in range(total - w, total)]


def read(path):
    lines = open(path).read().split("\n")
    head = lines[0].split()
    stage, pp, v, m, kind = int(head[1]), int(head[3]), int(head[5]), int(head[7]), head[8]
    ops = [(l.split()[0], int(l.split()[1]), int(l.split()[2])) for l in lines[1:] if l]
    return stage, pp, v, m, kind, ops


def check_stage(stage, pp, v, m, kind, ops):
    last = pp * v - 1
    compute = [o for o in ops if o[0] in ("F", "B")]
    assert compute == expected(kind, pp, v, m, stage), f"stage {stage}: order differs from {kind}"
    for i, (op, mb, c) in enumerate(ops):   # every transfer sits right around its compute
        if op == "F":
            assert (c == 0) or ops[i - 1] == ("recv-act", mb, c), f"stage {stage}: F {mb} {c} without its receive"
            assert (c == last) or ops[i + 1] == ("send-act", mb, c), f"stage {stage}: F {mb} {c} without its send"
        if op == "B":
            assert (c == last) or ops[i - 1] == ("recv-grad", mb, c), f"stage {stage}: B {mb} {c} without its receive"
            assert (c == 0) or ops[i + 1] == ("send-grad", mb, c), f"stage {stage}: B {mb} {c} without its send"


def bubble(traces, pp, v, m):
    """Runs the recorded lists against each other; returns (span - work) / span."""
    fdone, bdone, clock, pc = {}, {}, [0.0] * pp, [0] * pp
    last, unit, moved = pp * v - 1, 1.0 / v, True
    while moved:
        moved = False
        for s in range(pp):
            while pc[s] < len(traces[s]):
                op, mb, c = traces[s][pc[s]]
                need = fdone.get((mb, c - 1)) if op == "recv-act" else bdone.get((mb, c + 1)) if op == "recv-grad" else 0.0
                if need is None:
                    break
                clock[s] = max(clock[s], need)
                if op == "F":
                    clock[s] += unit; fdone[(mb, c)] = clock[s]
                if op == "B":
                    clock[s] += 2 * unit; bdone[(mb, c)] = clock[s]
                pc[s] += 1; moved = True
    assert all(pc[s] == len(traces[s]) for s in range(pp)), "the recorded lists deadlock"
    span = max(clock)
    return (span - 3.0 * m) / span


prefix, pp = sys.argv[1], int(sys.argv[2])
traces = {}
for s in range(pp):
    stage, pp_, v, m, kind, ops = read(f"{prefix}.{s}")
    assert stage == s and pp_ == pp
    check_stage(stage, pp, v, m, kind, ops)
    traces[s] = ops
got = bubble(traces, pp, v, m)
want = (pp - 1) / ((v * m if kind == "interleaved" else m) + pp - 1)
assert abs(got - want) < 1e-9, f"{kind}: bubble {got:.6f} from the recorded order, formula {want:.6f}"
print(f"{kind} pp {pp} v {v} m {m}: order as defined, bubble {got:.4f} = formula {want:.4f}")
