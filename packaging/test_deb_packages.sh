#!/usr/bin/env bash
# CTest packaging_deb: builds the Debian packages of a deepx build tree with `cpack -G DEB`,
# checks their names, contents and dependencies, extracts them with `dpkg-deb -x` into a scratch
# root (nothing is installed on the machine), and runs a smoke test there: the extracted deepx
# lists and certifies (one op) the extracted CPU plugin, a C client builds with the extracted
# deepx.pc, examples/minimal-plugin builds out of tree against the extracted libdeepx-dev, and
# the extracted deepxd (deepx-daemon) checks its shipped configuration.
#
# usage: test_deb_packages.sh <deepx build dir> <deepx source dir> <scratch dir>
#                             <cpack> <cmake> <generator> <C compiler>
# Exit status 77 (CTest: skipped) when the Debian tools it needs are missing.
set -euo pipefail

if [[ $# -ne 7 ]]; then
  echo "usage: $0 <build dir> <source dir> <scratch dir> <cpack> <cmake> <generator> <C compiler>" >&2
  exit 2
fi
build_dir=$1
source_dir=$2
scratch=$3
cpack=$4
cmake=$5
generator=$6
c_compiler=$7

for tool in dpkg-deb dpkg-shlibdeps file readelf; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (Debian: dpkg-deb and dpkg-shlibdeps come with dpkg and" \
         "dpkg-dev, file with file, readelf with binutils); cannot build or check .deb packages"
    exit 77
  fi
done

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

rm -rf "$scratch"
mkdir -p "$scratch/out" "$scratch/root"

step "cpack -G DEB in $build_dir (packages in $scratch/out)"
(cd "$build_dir" && "$cpack" -G DEB -B "$scratch/out") >"$scratch/cpack.log" 2>&1 || {
  cat "$scratch/cpack.log"
  fail "cpack -G DEB failed"
}
grep 'package: ' "$scratch/cpack.log" || true

# The .deb of one package name.
deb_of() {
  local f
  for f in "$scratch"/out/*.deb; do
    if [[ "$(dpkg-deb -f "$f" Package)" == "$1" ]]; then echo "$f"; return 0; fi
  done
  fail "cpack made no package named $1 (made: $(ls "$scratch"/out/*.deb))"
}
runtime_deb=$(deb_of deepx-runtime)
dev_deb=$(deb_of libdeepx-dev)
cpu_deb=$(deb_of deepx-plugin-cpu)
version=$(dpkg-deb -f "$runtime_deb" Version)

step "package dependencies"
depends() { dpkg-deb -f "$1" Depends; }
for f in "$runtime_deb" "$dev_deb" "$cpu_deb"; do
  printf '%s: %s\n' "$(dpkg-deb -f "$f" Package)" "$(depends "$f")"
done
[[ "$(depends "$runtime_deb")" == *libc6* ]] || fail "deepx-runtime does not depend on libc6 (dpkg-shlibdeps)"
[[ "$(depends "$dev_deb")" == *"deepx-runtime (= $version)"* ]] || fail "libdeepx-dev does not depend on deepx-runtime (= $version)"
[[ "$(depends "$dev_deb")" == *libdlpack-dev* ]] || fail "libdeepx-dev does not depend on libdlpack-dev"
[[ "$(depends "$cpu_deb")" == *"deepx-runtime (= $version)"* ]] || fail "deepx-plugin-cpu does not depend on deepx-runtime (= $version)"
[[ "$(depends "$cpu_deb")" == *libgomp1* ]] || fail "deepx-plugin-cpu does not depend on libgomp1 (dpkg-shlibdeps)"

step "package contents"
# (Listings go through files: grep -q on a pipe can end its writer early, which pipefail reports.)
contents() {
  dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|' >"$scratch/contents.txt"
}
has() { contents "$1"; grep -qx "$2" "$scratch/contents.txt" || fail "$(dpkg-deb -f "$1" Package) lacks $2"; }
lacks() { contents "$1"; ! grep -q "$2" "$scratch/contents.txt" || fail "$(dpkg-deb -f "$1" Package) holds $2"; }
sections() { readelf -S --wide "$1" >"$scratch/sections.txt" 2>/dev/null; }
has "$runtime_deb" /usr/bin/deepx
has "$runtime_deb" /usr/bin/deepx-certify
has "$runtime_deb" /usr/lib/libdeepx_host.so.0
has "$runtime_deb" /usr/lib/deepx/plugins/libdeepx-plugin-reference.so
lacks "$runtime_deb" 'include/deepx'
lacks "$runtime_deb" 'libdeepx-plugin-cpu'
lacks "$runtime_deb" '\.debug$'
has "$dev_deb" /usr/include/deepx/plugin.h
has "$dev_deb" /usr/lib/libdeepx_host.so
has "$dev_deb" /usr/lib/cmake/deepx/deepx-config.cmake
has "$dev_deb" /usr/lib/pkgconfig/deepx.pc
lacks "$dev_deb" 'libdeepx_host\.so\.'
has "$cpu_deb" /usr/lib/deepx/plugins/libdeepx-plugin-cpu.so
lacks "$cpu_deb" '\.debug$'

for f in "$scratch"/out/*.deb; do
  dpkg-deb -x "$f" "$scratch/root"
done
usr="$scratch/root/usr"
plugins="$usr/lib/deepx/plugins"

step "stripped binaries, debug info in .debug files (deepx-dbg)"
cpu_plugin="$plugins/libdeepx-plugin-cpu.so"
built_cpu="$build_dir/lib/deepx/plugins/libdeepx-plugin-cpu.so"
size() { stat -c %s "$1"; }
printf 'CPU plugin: built %s bytes, packaged %s bytes\n' "$(size "$built_cpu")" "$(size "$cpu_plugin")"
sections "$built_cpu"
if grep -q '[[:space:]]\.debug_info[[:space:]]' "$scratch/sections.txt"; then
  dbg_deb=$(deb_of deepx-dbg)
  [[ "$(depends "$dbg_deb")" == *"deepx-runtime (= $version)"* ]] || fail "deepx-dbg does not depend on deepx-runtime"
  lacks "$dbg_deb" 'plugin-cuda\|plugin-hip'   # their plugins are not packaged
  for bin in "$cpu_plugin" "$plugins/libdeepx-plugin-reference.so" "$usr/lib/libdeepx_host.so.0" \
             "$usr/bin/deepx" "$usr/bin/deepx-certify"; do
    real=$(readlink -f "$bin")
    name=$(basename "$real")
    debug="$(dirname "$real")/.debug/$name.debug"
    sections "$real"
    ! grep -q '\.debug_info' "$scratch/sections.txt" || fail "$real still carries debug info"
    [[ -f "$debug" ]] || fail "deepx-dbg lacks $debug"
    sections "$debug"
    grep -q '\.debug_info' "$scratch/sections.txt" || fail "$debug has no debug info"
    # readelf follows the .gnu_debuglink (checking its CRC) to the .debug file; depth 1: only
    # the compile units.
    readelf --debug-dump=follow-links --debug-dump=info --dwarf-depth=1 "$real" \
      >"$scratch/units.txt" 2>&1 || true
    grep -q DW_TAG_compile_unit "$scratch/units.txt" ||
      fail "the debug link of $real does not lead to its .debug file"
    printf '%s: %s bytes, %s: %s bytes\n' "$name" "$(size "$real")" ".debug/$name.debug" "$(size "$debug")"
  done
  (( $(size "$cpu_plugin") * 2 < $(size "$built_cpu") )) || fail "the packaged CPU plugin is not much smaller than the built one"
else
  echo "the build has no debug info: nothing to split"
fi

step "deepx plugins in the extracted root"
export DEEPX_PLUGIN_PATH=
"$usr/bin/deepx" version
"$usr/bin/deepx" plugins cpu reference | tee "$scratch/plugins.txt"
grep -q "^LOADED  cpu .*" "$scratch/plugins.txt" || fail "the extracted CPU plugin did not load"
grep -q "path: $plugins/libdeepx-plugin-cpu.so" "$scratch/plugins.txt" || fail "deepx did not load the extracted CPU plugin"
grep -q "kernels: 704" "$scratch/plugins.txt" || fail "the extracted CPU plugin registered no kernels"

step "deepx certify cpu --ops dx.add in the extracted root"
"$usr/bin/deepx" certify cpu --ops dx.add --quiet --out "$scratch/certification" ||
  fail "the extracted CPU plugin is not certified for dx.add"

step "a C client built with the extracted deepx.pc"
if command -v pkg-config >/dev/null; then
  cat >"$scratch/client.c" <<'EOF'
#include <stdio.h>
#include "deepx/host.h"
int main(void) { printf("ABI %u.%u\n", DX_VERSION_MAJOR(dx_abi_version()), DX_VERSION_MINOR(dx_abi_version())); return 0; }
EOF
  pc_flags=$(PKG_CONFIG_PATH="$usr/lib/pkgconfig" pkg-config --cflags --libs deepx)
  echo "pkg-config --cflags --libs deepx: $pc_flags"
  # shellcheck disable=SC2086
  "$c_compiler" "$scratch/client.c" -o "$scratch/client" $pc_flags -Wl,-rpath,"$usr/lib"
  "$scratch/client"
else
  echo "pkg-config is not installed: the deepx.pc check is left out"
fi

step "examples/minimal-plugin out of tree against the extracted libdeepx-dev"
bash "$source_dir/examples/test_minimal_plugin.sh" "--prefix=$usr" \
  "$source_dir/examples/minimal-plugin" "$scratch/minimal-plugin" "$cmake" "$generator" "$c_compiler"

step "deepx-daemon: deepxd, its unit and its configuration"
if [[ -x "$build_dir/bin/deepxd" ]]; then
  daemon_deb=$(deb_of deepx-daemon)
  printf 'deepx-daemon: %s\n' "$(depends "$daemon_deb")"
  [[ "$(depends "$daemon_deb")" == *"deepx-runtime (= $version)"* ]] || fail "deepx-daemon does not depend on deepx-runtime (= $version)"
  [[ "$(depends "$daemon_deb")" == *libuv1* ]] || fail "deepx-daemon does not depend on libuv1 (dpkg-shlibdeps)"
  [[ "$(depends "$daemon_deb")" == *libmicrohttpd* ]] || fail "deepx-daemon does not depend on libmicrohttpd (dpkg-shlibdeps)"
  [[ "$(depends "$daemon_deb")" == *adduser* ]] || fail "deepx-daemon does not depend on adduser (its postinst)"
  has "$daemon_deb" /usr/bin/deepxd
  has "$daemon_deb" /usr/lib/systemd/system/deepxd.service
  has "$daemon_deb" /usr/share/deepx-daemon/deepxd.toml
  lacks "$runtime_deb" deepxd
  dpkg-deb -I "$daemon_deb" postinst >"$scratch/postinst" || fail "deepx-daemon has no postinst"
  grep -q 'adduser --system' "$scratch/postinst" || fail "the postinst of deepx-daemon creates no user"
  grep -qx 'ExecStart=/usr/bin/deepxd --config /etc/deepx/deepxd.toml' \
    "$scratch/root/usr/lib/systemd/system/deepxd.service" || fail "the unit does not start /usr/bin/deepxd"
  # The extracted deepxd checks the shipped configuration, its plugin path moved into the root.
  sed "s|/usr/lib/deepx/plugins/|$plugins/|" "$scratch/root/usr/share/deepx-daemon/deepxd.toml" \
    >"$scratch/deepxd.toml"
  "$usr/bin/deepxd" --check-config "$scratch/deepxd.toml" || fail "the shipped deepxd.toml does not pass --check-config"
else
  echo "deepxd is not built: no deepx-daemon package to check"
fi

step "PASS: the Debian packages extract, load, certify and build a plugin"
