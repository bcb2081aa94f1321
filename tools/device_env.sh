# Source this on the GPU machine (no network, no apt): unpacks the Debian -dev packages that
# tools/fetch_device_deps.sh saved in .deps/ into /tmp/deps and points CMake, pkg-config and
# the loader at them. Usage (from the repo root): `source tools/device_env.sh`.
deps_root=/tmp/deps
if [[ ! -f $deps_root/.done ]]; then
  mkdir -p "$deps_root"
  for f in .deps/*.deb; do dpkg -x "$f" "$deps_root"; done
  touch "$deps_root/.done"
fi
export CMAKE_PREFIX_PATH="$deps_root/usr:${CMAKE_PREFIX_PATH:-}"
export PKG_CONFIG_PATH="$deps_root/usr/lib/x86_64-linux-gnu/pkgconfig:$deps_root/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
export PKG_CONFIG_SYSROOT_DIR="$deps_root"
export PATH="$deps_root/usr/bin:$PATH"
export LD_LIBRARY_PATH="$deps_root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
