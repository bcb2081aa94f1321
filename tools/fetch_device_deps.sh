#!/usr/bin/env bash
# Saves the Debian packages the C++ build needs into .deps/ (git-ignored) so that a run on the
# GPU machine, which has no network, can carry them (`carry: [".deps"]`) and unpack them with
# `source tools/device_env.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps && cd .deps
apt-get download nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libpcre2-dev libpcre2-8-0 \
  libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libgtest-dev libgmock-dev googletest \
  libsqlite3-dev libsqlite3-0 bubblewrap \
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libbrotli-dev zlib1g-dev
