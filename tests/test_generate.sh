#!/usr/bin/env bash
# test_generate.sh — `ted generate`'s sampling options on a small byte model:
# --num-samples 3 prints three samples under "--- sample i/3" headers; with --top-p 1e-6 only
# the most probable token survives, so different seeds give the same text, while with the
# default top-p 1 they differ; --stop " " ends each sample at its first space; a top-p outside
# (0, 1] is refused with one line.
source "${TED_ROOT:?}/tests/lib.sh"
"$TED" train --data data/moby-dick.txt --n-layer 1 --n-embd 32 --n-head 2 --n-positions 32 --steps 30 --lr 3e-3 \
  --warmup 2 --eval-windows 2 --save "$W/ck" >/dev/null 2>&1 || fail "training"
gen() { "$TED" generate --load "$W/ck" --prompt "the " --tokens 40 "$@" 2>"$W/gen.err"; }
gen --num-samples 3 --top-p 1e-6 >"$W/greedy.out"
gen --num-samples 3 >"$W/plain.out"
grep -q '^generated 120 tokens in' "$W/gen.err" || fail "no generation summary on stderr"
gen --num-samples 3 --stop " " >"$W/stop.out"
/usr/bin/python3 - "$W" <<'PY' || fail "samples"
import re, sys
def samples(name):
    raw = open(f"{sys.argv[1]}/{name}", "rb").read()
    parts = re.split(rb"--- sample \d/3\n", raw)
    assert parts[0] == b"" and len(parts) == 4, f"{name}: not three samples under headers"
    for p in parts[1:]: assert p.startswith(b"the ") and p.endswith(b"\n"), p
    return [p[4:-1] for p in parts[1:]]
g, p, s = samples("greedy.out"), samples("plain.out"), samples("stop.out")
assert len(set(g)) == 1, f"top-p 1e-6: different seeds gave different texts {g}"
assert len(set(p)) > 1, f"top-p 1: three seeds gave one text {p}"
for t in s: assert b" " not in t or t.index(b" ") == len(t) - 1, f"--stop: text after the first space {t}"
assert any(t.endswith(b" ") for t in s), f"--stop: no sample reached a space {s}"
print("ok   --num-samples headers; --top-p 1e-6 keeps one token (seeds agree); --stop ends at the first space")
PY
rc=0; gen --top-p 1.5 >/dev/null || rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$W/gen.err")" -eq 1 ] && grep -q -- "--top-p must be in (0, 1]" "$W/gen.err" || fail "--top-p 1.5: exit $rc"
echo "ok   --top-p 1.5 refused with one line"
