#!/usr/bin/env bash
# The vendor's path, end to end: install the SDK from a build tree into a scratch prefix, build
# examples/minimal-plugin out of tree against that prefix only, then list and certify the plugin
# with the installed CLI.
#
# usage: test_minimal_plugin.sh <deepx build dir> <minimal-plugin source dir> <scratch dir>
#                               [<cmake> [<generator> [<C compiler>]]]
set -euo pipefail

build_dir=$1
source_dir=$2
scratch=$3
cmake=${4:-cmake}
generator=${5:-Ninja}
c_compiler=${6:-cc}

prefix="$scratch/prefix"
plugin_build="$scratch/minimal-plugin-build"
report_dir="$scratch/certification"

step() { printf '\n== %s\n' "$*"; }

rm -rf "$scratch"
mkdir -p "$scratch"

step "install the SDK from $build_dir into $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" >"$scratch/install.log" || {
  cat "$scratch/install.log"
  exit 1
}
for needed in bin/deepx bin/deepx-certify include/deepx/plugin.h; do
  if [[ ! -e "$prefix/$needed" ]]; then
    echo "the install lacks $needed" >&2
    exit 1
  fi
done
plugin_dir=$(dirname "$(find "$prefix" -name 'libdeepx-plugin-reference.so' -print -quit)")
if [[ -z "$plugin_dir" || "$plugin_dir" == "." ]]; then
  echo "the install lacks the reference plugin (libdeepx-plugin-reference.so)" >&2
  exit 1
fi

step "configure and build examples/minimal-plugin out of tree"
# Nothing of the build tree is visible here: only the installed package under $prefix.
"$cmake" -S "$source_dir" -B "$plugin_build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$c_compiler" -DCMAKE_PREFIX_PATH="$prefix"
"$cmake" --build "$plugin_build"
plugin="$plugin_build/libdeepx-plugin-minimal.so"
[[ -f "$plugin" ]] || { echo "the build did not produce $plugin" >&2; exit 1; }

step "the plugin exports exactly one symbol"
if command -v nm >/dev/null; then
  exported=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u)
  echo "$exported"
  [[ "$exported" == "dx_plugin_entry" ]] || { echo "unexpected exports" >&2; exit 1; }
fi

step "deepx plugins $plugin"
"$prefix/bin/deepx" plugins "$plugin"

step "deepx certify $plugin"
"$prefix/bin/deepx" certify "$plugin" --out "$report_dir"

step "PASS: built out of tree, loaded and certified"
