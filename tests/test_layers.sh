#!/usr/bin/env bash
# The rooms of src/ (src/README.md): scripts/check_layers.py passes on the tree, and fails,
# naming the file, on an include that points up, on an include circle, on a header that is no
# room's, and on a source file outside the rooms.
source "${TED_ROOT:?}/tests/lib.sh"
PY=${PYTHON:-python3}
CHECK=$TED_ROOT/scripts/check_layers.py
# a copy of src/ with one change; prints the check's output and its exit code
broken() {
  rm -rf "$TED_TMP/src" && mkdir -p "$TED_TMP" && cp -r "$TED_ROOT/src" "$TED_TMP/src"
  (cd "$TED_TMP/src" && eval "$1")
  set +e; "$PY" "$CHECK" "$TED_TMP/src"; echo "rc=$?"; set -e
}

out=$("$PY" "$CHECK" "$TED_ROOT/src") && rc=0 || rc=$?
echo "$out"
expect "the tree keeps the rules" '[ $rc -eq 0 ] && grep -q "every include points down, no circle" <<<"$out"'

out=$(broken 'sed -i "0,/#include/s||#include \"model/model.h\"\n#include|" core/alloc.c')
expect "an upward include (core -> model) fails, naming the file and both rooms" \
  'grep -q "rc=1" <<<"$out" && grep -q "src/core/alloc.c: includes \"model/model.h\": room core may not include room model" <<<"$out"'

out=$(broken 'sed -i "0,/#include/s||#include \"io/checkpoint.h\"\n#include|" io/ckpt_meta.h')
expect "a circle inside a room (ckpt_meta -> checkpoint -> ... -> ckpt_meta) fails, naming the include that closes it" \
  'grep -q "rc=1" <<<"$out" && grep "include circle among" <<<"$out" | grep -q "src/io/ckpt_meta.h includes \"io/checkpoint.h\""'

out=$(broken 'sed -i "0,/#include/s||#include \"alloc.h\"\n#include|" nn/ops.c')
expect "a header named without its room fails" \
  'grep -q "rc=1" <<<"$out" && grep -q "src/nn/ops.c: includes \"alloc.h\", which is no header of a room" <<<"$out"'

out=$(broken 'echo "int x;" > stray.c; mkdir -p extra && echo "int y;" > extra/y.c')
expect "a source outside the rooms and a folder that is no room fail" \
  'grep -q "rc=1" <<<"$out" && grep -q "src/stray.c: a source file outside the rooms" <<<"$out" && grep -q "src/extra/: a folder that is not a room" <<<"$out"'

summary
