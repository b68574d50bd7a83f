#!/usr/bin/env bash
# test_tokenize_docs.sh — `ted tokenize` over several documents: two text files given to one
# --input, and a JSONL file holding the same two texts as "text" fields, both give exactly the
# ids of each file tokenized alone, one after the other (each alone starts with <|endoftext|>,
# so documents are separated by it); a JSONL line without a "text" string is refused with one
# line naming the file and line, exit 2.
source "${TED_ROOT:?}/tests/lib.sh"
head -c 3000 data/moby-dick.txt >"$W/a.txt"
tail -c 2000 data/moby-dick.txt >"$W/b.txt"
/usr/bin/python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
with open(f"{w}/docs.jsonl", "w") as f:
    for name in ("a", "b"):
        f.write(json.dumps({"text": open(f"{w}/{name}.txt", encoding="utf-8").read(), "id": name}) + "\n")
PY
tok() { local out=$1; shift; "$TED" tokenize --val-frac 0 --output "$W/$out" --input "$@" >"$W/$out.log" 2>&1 || { cat "$W/$out.log"; fail "tokenize $*"; }; }
tok a "$W/a.txt"; tok b "$W/b.txt"; tok ab "$W/a.txt" "$W/b.txt"; tok j "$W/docs.jsonl"
grep -q "2 files: .* bytes, 2 documents" "$W/ab.log" || fail "two files: no summary"
grep -q "^tokenize: .* bytes (100%)" "$W/j.log" || fail "no progress line"
/usr/bin/python3 - "$W" <<'PY' || fail "ids"
import struct, sys
w = sys.argv[1]
def ids(p):
    raw = open(f"{w}/{p}_train_000000.bin", "rb").read()
    return list(struct.unpack(f"<{(len(raw) - 1024) // 2}H", raw[1024:]))
a, b = ids("a"), ids("b")
assert a[0] == 50256 and b[0] == 50256 and 50256 not in a[1:] + b[1:]
assert ids("ab") == a + b, "two files differ from each alone"
assert ids("j") == a + b, "the JSONL differs from the files alone"
print(f"ok   two files and a JSONL of the same texts: {len(a) + len(b)} ids, <|endoftext|> before each document")
PY
printf '{"text": "fine"}\n{"txt": "no"}\n' >"$W/bad.jsonl"
rc=0; "$TED" tokenize --input "$W/bad.jsonl" --output "$W/bad" >/dev/null 2>"$W/bad.err" || rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$W/bad.err")" -eq 1 ] && grep -q "bad.jsonl:2: expected a JSON object with a \"text\" string" "$W/bad.err" ||
  { cat "$W/bad.err"; fail "bad JSONL: exit $rc"; }
ls "$W"/bad_* >/dev/null 2>&1 && fail "bad JSONL wrote shards"
echo "ok   a JSONL line without \"text\" refused: $(cat "$W/bad.err")"
