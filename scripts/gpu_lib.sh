# shellcheck shell=bash
# Sourced by scripts/gpu_check.sh and bench/gpu_bench.sh: the GPU machine's setup and timed steps.
#   gpu_require          fail fast, in one line, where there is no GPU or no CUDA build to run
#   gpu_setup            the carried .debs installed and the environment of a carried build (once)
#   step NAME SECS CMD   CMD (a program, or a function exported with export -f) under a timeout of
#                        SECS or less if the budget ends sooner, its output in $LOGS/NAME.txt; one
#                        JSON line on stdout: status ok|fail|timeout|skipped, rc, seconds, the log's
#                        "ok" and "FAIL" lines counted, its last line
# The budget: DEADLINE (epoch seconds) less RESERVE seconds kept for what comes after.

gpu_require() {
  command -v nvidia-smi >/dev/null || { echo "$1: no GPU: nvidia-smi not found" >&2; exit 2; }
  nvidia-smi -L >/dev/null 2>&1 || { echo "$1: no GPU: nvidia-smi: $(nvidia-smi -L 2>&1 | head -1)" >&2; exit 2; }
  [ -x "$TED" ] || { echo "$1: $TED not found or not executable: build it with CUDA (docs/gpus.md) and carry it" >&2
                     exit 2; }
}

gpu_setup() {
  [ -n "${TED_GPU_ENV:-}" ] && return 0
  if [ -d .debs ] && ! bash scripts/device_deps.sh install >/dev/null 2>&1; then
    echo "gpu_setup: installing .debs/ failed" >&2
  fi
  eval "$(TED=$TED bash scripts/device_deps.sh env)"
  export TED_GPU_ENV=1 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  local missing
  missing=$(ldd "$TED" 2>/dev/null | awk '/not found/ {print $1}' | paste -sd' ')
  [ -z "$missing" ] || { echo "gpu_setup: $TED still misses $missing" >&2; exit 2; }
}

step() {
  local name=$1 want=$2 t0=$EPOCHSECONDS rc status left log="$LOGS/$1.txt"; shift 2
  left=$((DEADLINE - EPOCHSECONDS - ${RESERVE:-0}))
  if [ "$left" -lt 5 ]; then
    echo "skipped: budget spent" >"$log"; status=skipped rc=-1
  else
    # a shell function (exported with export -f) runs in a child bash, since timeout runs programs only
    if declare -F "$1" >/dev/null; then set -- bash -c '"$@"' "$1" "$@"; fi
    timeout -k 5 "$(( want < left ? want : left ))" "$@" >"$log" 2>&1
    rc=$?
    case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=fail ;; esac
  fi
  printf '{"step": "%s", "status": "%s", "rc": %d, "s": %d, "ok": %d, "fail": %d, "last": "%s"}\n' "$name" "$status" \
    "$rc" $((EPOCHSECONDS - t0)) "$(grep -cE '^ok |[[:space:]]ok$' "$log")" "$(grep -cE '^FAIL|[[:space:]]FAIL' "$log")" \
    "$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | tr -d '\000-\037\042\134' | cut -c1-160)"
  [ "$status" = ok ]
}
