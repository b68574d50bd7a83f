#!/usr/bin/env bash
# tests/fuzz/build.sh OUT — the sanitizer build: ted's sources compiled by clang with ASan + UBSan
# (and libFuzzer's coverage) into OUT/libted_san.a, then in OUT:
#   fuzz_*     a libFuzzer harness per parser (tests/fuzz/fuzz_*.c)
#   test_*     the C unit tests (tests/test_*.c, not the CUDA ones) under ASan + UBSan
# Not compiled: src/cli (the commands: no harness or unit test calls into the top room, so nothing of
# it would run under the sanitizers) and the CUDA backend. The links take from the archive only the
# objects a program uses. Compiles and links run JOBS at a time (default: nproc).
# Incremental: an object is rebuilt when its source or any header is newer. Exit 77 when clang
# cannot build libFuzzer targets (Debian: apt-get install clang).
set -euo pipefail
OUT=${1:?usage: build.sh OUT}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT/obj"
CC=${CLANG:-clang}
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' >"$OUT/probe.c"
"$CC" -fsanitize=fuzzer,address,undefined "$OUT/probe.c" -o "$OUT/probe" 2>/dev/null || { echo "no clang with libFuzzer"; exit 77; }
BLAS_INC=$(ls -d /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp \
           /usr/include/openblas 2>/dev/null | head -1 || true)
BLAS_LIB=$(ls /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so /usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so \
           2>/dev/null | head -1 || true)
[ -n "$BLAS_LIB" ] || BLAS_LIB=-lopenblas
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1)
CFLAGS=(-std=c11 -D_GNU_SOURCE -fopenmp -I"$ROOT/src" -I"$BLAS_INC" $(pkg-config --cflags libcjson libpcre2-8)
        $(mpicc --showme:compile) -Wno-unknown-pragmas -Wno-unknown-attributes -Wno-pass-failed)
LIBS=("$BLAS_LIB" -ldnnl $(pkg-config --libs libcjson libpcre2-8) $(mpicc --showme:link) -fopenmp -lm -lpthread -rtlib=compiler-rt)
JOBS=${JOBS:-$(nproc)}
running=0
# bg CMD...: runs CMD in the background, at most JOBS at once; a failure ends the build (set -e)
bg() {
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
  "$@" & running=$((running + 1))
}
drain() { while [ "$running" -gt 0 ]; do wait -n; running=$((running - 1)); done; }
newest_header=$(ls -t "$ROOT"/src/*/*.h | head -1)
objs=()
for src in "$ROOT"/src/*/*.c; do
  room=$(basename "$(dirname "$src")")
  [ "$room" = cli ] && continue
  obj=$OUT/obj/${room}_$(basename "$src" .c).o
  if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_header" -nt "$obj" ]; then
    bg "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  fi
  objs+=("$obj")
done
drain
rm -f "$OUT"/obj/cli_*.o   # left by an older build.sh
LIB=$OUT/libted_san.a
if [ ! -e "$LIB" ] || [ -n "$(find "$OUT/obj" -newer "$LIB" -name '*.o' | head -1)" ]; then
  rm -f "$LIB"; ar rcs "$LIB" "${objs[@]}"
fi
for src in "$ROOT"/tests/fuzz/fuzz_*.c "$ROOT"/tests/test_*.c; do
  name=$(basename "$src" .c)
  case $name in test_cuda_*) continue ;; esac
  fuzz=(); [[ $name == fuzz_* ]] && fuzz=(-fsanitize=fuzzer)
  exe=$OUT/$name
  if [ ! -e "$exe" ] || [ "$src" -nt "$exe" ] || [ "$LIB" -nt "$exe" ]; then
    bg "$CC" "${CFLAGS[@]}" "${SAN[@]}" "${fuzz[@]}" "$src" "$LIB" "${LIBS[@]}" -o "$exe"
  fi
done
drain
