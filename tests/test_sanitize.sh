#!/usr/bin/env bash
# test_sanitize.sh — the sanitizer build (tests/fuzz/build.sh: clang, ASan + UBSan):
#  1. every C unit test (tests/test_*.c, not the CUDA ones) passes under ASan + UBSan (leak
#     reports are off: the tests themselves do not free what they allocate);
#  2. every parser's libFuzzer harness (tests/fuzz/fuzz_*.c) runs FUZZ_SECONDS (default 2) from
#     its corpus in tests/fuzz/corpus/NAME without a finding (new inputs go to a scratch copy).
# The build is kept in build/san and rebuilt incrementally. Exit 77 (skipped) without clang.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
SAN=${TED_SAN_DIR:-$(dirname "$(dirname "$TED_TMP")")/san}
bash tests/fuzz/build.sh "$SAN" >"$TED_TMP/build.log" 2>&1
rc=$?
[ $rc -eq 77 ] && { echo "skipped: clang cannot build libFuzzer targets"; exit 77; }
[ $rc -eq 0 ] || { tail -20 "$TED_TMP/build.log"; echo "FAIL: sanitizer build"; exit 1; }
fail=0
for t in "$SAN"/test_*; do
  name=$(basename "$t")
  if ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 OMP_NUM_THREADS=2 \
       timeout 300 "$t" >"$TED_TMP/$name.log" 2>&1; then
    echo "ok    $name under ASan + UBSan"
  else
    echo "FAIL  $name under ASan + UBSan"; grep -m5 -E "ERROR|runtime error|FAIL" "$TED_TMP/$name.log"; fail=$((fail + 1))
  fi
done
for f in "$SAN"/fuzz_*; do
  name=$(basename "$f"); target=${name#fuzz_}
  [ -d "tests/fuzz/corpus/$target" ] || { echo "FAIL  $name: no corpus tests/fuzz/corpus/$target"; fail=$((fail + 1)); continue; }
  mkdir -p "$TED_TMP/corpus_$target"
  if timeout 120 "$f" -max_total_time="${FUZZ_SECONDS:-2}" -close_fd_mask=3 -rss_limit_mb=2048 \
       "$TED_TMP/corpus_$target" "tests/fuzz/corpus/$target" >"$TED_TMP/$name.log" 2>&1; then
    echo "ok    $name: $(grep -E '^Done' "$TED_TMP/$name.log")"
  else
    echo "FAIL  $name: a finding"; grep -m8 -E "ERROR|runtime error|SUMMARY|Test unit written" "$TED_TMP/$name.log"
    fail=$((fail + 1))
  fi
done
[ "$fail" -eq 0 ]
