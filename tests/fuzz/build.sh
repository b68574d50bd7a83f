#!/usr/bin/env bash
# tests/fuzz/build.sh OUT — the sanitizer build: ted's sources (not main.c, not the CUDA backend)
# compiled by clang with ASan + UBSan (and libFuzzer's coverage), then in OUT:
#   fuzz_*     a libFuzzer harness per parser (tests/fuzz/fuzz_*.c)
#   test_*     the C unit tests (tests/test_*.c, not the CUDA ones) under ASan + UBSan
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
LIBS=("$BLAS_LIB" $(pkg-config --libs libcjson libpcre2-8) $(mpicc --showme:link) -fopenmp -lm -lpthread -rtlib=compiler-rt)
newest_header=$(ls -t "$ROOT"/src/*/*.h | head -1)
objs=()
for src in "$ROOT"/src/*/*.c; do
  room=$(basename "$(dirname "$src")")
  name=${room}_$(basename "$src" .c)
  [ "$name" = cli_main ] && continue
  obj=$OUT/obj/$name.o
  if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_header" -nt "$obj" ]; then
    "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  fi
  objs+=("$obj")
done
for src in "$ROOT"/tests/fuzz/fuzz_*.c; do
  exe=$OUT/$(basename "$src" .c)
  if [ ! -e "$exe" ] || [ "$src" -nt "$exe" ] || [ -n "$(find "$OUT/obj" -newer "$exe" -name '*.o' | head -1)" ]; then
    "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer "$src" "${objs[@]}" "${LIBS[@]}" -o "$exe"
  fi
done
for src in "$ROOT"/tests/test_*.c; do
  case $(basename "$src") in test_cuda_*) continue ;; esac
  exe=$OUT/$(basename "$src" .c)
  if [ ! -e "$exe" ] || [ "$src" -nt "$exe" ] || [ -n "$(find "$OUT/obj" -newer "$exe" -name '*.o' | head -1)" ]; then
    "$CC" "${CFLAGS[@]}" "${SAN[@]}" "$src" "${objs[@]}" "${LIBS[@]}" -o "$exe"
  fi
done
