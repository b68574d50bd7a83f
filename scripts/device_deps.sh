#!/usr/bin/env bash
# What a bare GPU machine that cannot reach a package registry needs to run a ted built elsewhere
# (a lent device machine: an NVIDIA driver, the CUDA toolkit, PyTorch and its nvidia wheels, but no
# OpenBLAS, cJSON, PCRE2 or Open MPI, maybe no /usr/bin/python3):
#   bash scripts/device_deps.sh fetch      # here (Debian, network): the .deb files into .debs/
#   bash scripts/device_deps.sh install    # there (root): unpacks those whose package is not installed
#   eval "$(bash scripts/device_deps.sh env)"   # there: the environment a carried build runs in
# .debs/ is git-ignored; name it in the device tool's `carry`. (About 31 MB.)
# `env` prints export lines: LD_LIBRARY_PATH with the folder of every library build/ted (or $TED)
# misses, searched in the CUDA toolkit, Debian's openblas-openmp and the Python nvidia-* wheels
# (NCCL may be only there); PATH with the toolkit's tools (compute-sanitizer); PYTHON (a python3,
# one with torch if /usr/bin/python3 or the one on PATH has it); and PMIX_MCA_preg=native,
# without which Debian's mpiexec (PMIx 4.2) segfaults in pmix_preg_base_generate_ppn there.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libgfortran5 libcjson-dev libcjson1
      libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libopenmpi-dev libopenmpi3 openmpi-bin
      openmpi-common libhwloc15 libhwloc-plugins libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7
      libevent-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libnl-3-200
      libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libltdl7 libmunge2 libxnvctrl0 libpciaccess0
      libxml2 libicu72 ocl-icd-libopencl1 libdnnl2)

# The folders to search for a missing shared library, in order.
lib_roots() {
  local py=$1 sp
  ls -d /usr/local/cuda*/targets/x86_64-linux/lib /usr/local/cuda*/lib64 /usr/local/cuda*/lib \
        /usr/lib/x86_64-linux-gnu/openblas-openmp 2>/dev/null || true
  [ -n "$py" ] || return 0
  for sp in $("$py" -c 'import site; print(*site.getsitepackages())' 2>/dev/null); do
    [ -d "$sp/nvidia" ] && echo "$sp/nvidia"
    [ -d "$sp/torch/lib" ] && echo "$sp/torch/lib"
  done
  return 0
}

print_env() {
  local ted=${TED:-build/ted} py dirs=() lib d
  for py in /usr/bin/python3 "$(command -v python3 || true)" ""; do   # one with torch if there is one
    [ -x "$py" ] && "$py" -c 'import torch' 2>/dev/null && break
  done
  [ -n "$py" ] || py=$(command -v python3 || true)
  echo "export PMIX_MCA_preg=native"
  [ -n "$py" ] && echo "export PYTHON=$py"
  for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && echo "export PATH=$d:\$PATH"; done
  [ -x "$ted" ] || { echo "device_deps: $ted not found: nothing to search libraries for" >&2; return 0; }
  mapfile -t roots < <(lib_roots "$py")
  [ ${#roots[@]} -gt 0 ] || { echo "device_deps: no CUDA toolkit or library folder found" >&2; return 0; }
  for lib in $(ldd "$ted" 2>/dev/null | awk '/not found/ {print $1}'); do
    d=$(find "${roots[@]}" -name "$lib" -print -quit 2>/dev/null || true)
    if [ -n "$d" ]; then dirs+=("$(dirname "$d")"); else echo "device_deps: $lib not found (searched ${roots[*]})" >&2; fi
  done
  [ ${#dirs[@]} -gt 0 ] && echo "export LD_LIBRARY_PATH=$(printf '%s\n' "${dirs[@]}" | sort -u | paste -sd:)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  return 0
}

case "${1:-}" in
  fetch)
    mkdir -p .debs && cd .debs && apt-get download "${pkgs[@]}" ;;
  install)
    for f in .debs/*.deb; do
      p=$(dpkg-deb -f "$f" Package)
      dpkg -s "$p" >/dev/null 2>&1 && continue   # the machine's own version stays
      dpkg -x "$f" /
    done
    # what the packages' maintainer scripts would have done: the alternatives' links
    for b in mpicc mpirun mpiexec; do [ -e /usr/bin/$b ] || ln -s $b.openmpi /usr/bin/$b; done
    ldconfig ;;
  env) print_env ;;
  *) echo "usage: $0 fetch|install|env" >&2; exit 2 ;;
esac
