#!/usr/bin/env bash
# Installs kernelllm on a Debian/Ubuntu machine: the system libraries the C++ build uses
# (apt, only the missing ones), then `pip install .` (native library, CLI, Python binding).
# Safe to run again; set KERNELLLM_SKIP_APT=1 where the packages are provided otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(g++ make cmake ninja-build pkg-config git
              nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libgtest-dev libgmock-dev
              libsqlite3-dev libcpp-httplib-dev libedit-dev bubblewrap)
if [[ "${KERNELLLM_SKIP_APT:-0}" != 1 ]] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

echo "setup: pip install . (builds the native library, the kernelllm CLI and the binding)"
python3 -m pip install --quiet ${KERNELLLM_PIP_FLAGS:-} .
command -v kernelllm >/dev/null && kernelllm --version
if ! python3 -c "import torch, triton" >/dev/null 2>&1; then
  echo "setup: note: PyTorch and/or Triton are not importable; verification (optimize, verify, eval, repl) needs" \
       "them: pip install torch triton (a CPU-only machine runs kernels with TRITON_INTERPRET=1)"
fi
