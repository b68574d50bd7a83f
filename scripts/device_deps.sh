#!/usr/bin/env bash
# The build dependencies of ted for a bare GPU machine that cannot reach a package registry
# (the lent device machines: CUDA, CMake and PyTorch, but no OpenBLAS, cJSON, PCRE2, Open MPI):
#   bash scripts/device_deps.sh fetch      # here (Debian, network): the .deb files into .debs/
#   bash scripts/device_deps.sh install    # there (root): unpacks those whose package is not installed
# .debs/ is git-ignored; name it in the device tool's `carry`. (About 31 MB.)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libgfortran5 libcjson-dev libcjson1
      libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libopenmpi-dev libopenmpi3 openmpi-bin
      openmpi-common libhwloc15 libhwloc-plugins libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7
      libevent-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libnl-3-200
      libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libltdl7 libmunge2 libxnvctrl0 libpciaccess0
      libxml2 libicu72 ocl-icd-libopencl1)
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
  *) echo "usage: $0 fetch|install" >&2; exit 2 ;;
esac
