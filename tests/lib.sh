# lib.sh — the preamble every script test shares, sourced first:
#     source "${TED_ROOT:?}/tests/lib.sh"
# Strict mode (a test that wants to go on after a failing command says `set +e` after it), the
# environment CTest gives (tests/tests.cmake: TED the binary, TED_ROOT the source tree, TED_TMP
# the test's scratch folder, made fresh here), the source tree as the working folder, W for the
# scratch folder, and fail: one FAIL line, exit 1. The MPI tests also source tests/mpi_env.sh.
set -euo pipefail
: "${TED:?}" "${TED_ROOT:?}" "${TED_TMP:?}"
rm -rf "$TED_TMP" && mkdir -p "$TED_TMP"
cd "$TED_ROOT"
W=$TED_TMP
fail() { echo "FAIL: $*"; exit 1; }

# The counted checks of a test that goes on after a failed check: ok and bad print one line each,
# expect NAME CONDITION evaluates the condition; summary prints the counts and is the test's
# status (a test may redefine bad to print more, e.g. the tail of a log).
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
expect() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
summary() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
