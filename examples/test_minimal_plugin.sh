#!/usr/bin/env bash
# The vendor's path, end to end: install the SDK from a build tree into a scratch prefix (or take
# an SDK already laid out in a prefix, such as the extracted Debian packages), build
# examples/minimal-plugin out of tree against that prefix only, check that deepx_add_plugin
# optimises when no build type is set, then list and certify the plugin with the installed CLI.
#
# usage: test_minimal_plugin.sh <deepx build dir | --prefix=<installed SDK>>
#                               <minimal-plugin source dir> <scratch dir>
#                               [<cmake> [<generator> [<C compiler>]]]
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 <deepx build dir | --prefix=<installed SDK>> <minimal-plugin source dir> <scratch dir> [<cmake> [<generator> [<C compiler>]]]" >&2
  exit 2
fi
build_dir=$1
source_dir=$2
scratch=$3
cmake=${4:-cmake}
generator=${5:-Ninja}
c_compiler=${6:-cc}

plugin_build="$scratch/minimal-plugin-build"
report_dir="$scratch/certification"

step() { printf '\n== %s\n' "$*"; }

rm -rf "$scratch"
mkdir -p "$scratch"

if [[ "$build_dir" == --prefix=* ]]; then
  prefix=${build_dir#--prefix=}
  step "use the SDK installed in $prefix"
else
  prefix="$scratch/prefix"
  step "install the SDK from $build_dir into $prefix"
  "$cmake" --install "$build_dir" --prefix "$prefix" >"$scratch/install.log" || {
    cat "$scratch/install.log"
    exit 1
  }
fi
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

# The compile command of minimal_plugin.c in a configured build directory.
compile_command() {
  local db="$1/compile_commands.json"
  [[ -f "$db" ]] || { echo "no $db (CMAKE_EXPORT_COMPILE_COMMANDS)" >&2; exit 1; }
  grep '"command"' "$db" | grep 'minimal_plugin\.c' || {
    echo "$db has no compile command for minimal_plugin.c" >&2
    exit 1
  }
}

step "configure and build examples/minimal-plugin out of tree"
# Nothing of the build tree is visible here: only the installed package under $prefix.
# No CMAKE_BUILD_TYPE, as a vendor who sets none: deepx_add_plugin must still optimise.
"$cmake" -S "$source_dir" -B "$plugin_build" -G "$generator" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_C_COMPILER="$c_compiler" -DCMAKE_PREFIX_PATH="$prefix"
"$cmake" --build "$plugin_build"
plugin="$plugin_build/libdeepx-plugin-minimal.so"
[[ -f "$plugin" ]] || { echo "the build did not produce $plugin" >&2; exit 1; }

step "no build type: the plugin is compiled with -O2"
command_line=$(compile_command "$plugin_build")
echo "$command_line"
[[ " $command_line " == *" -O2 "* ]] || {
  echo "deepx_add_plugin did not add -O2 to a build without CMAKE_BUILD_TYPE" >&2
  exit 1
}

step "a build type the vendor chose is left alone (Debug: -g, no -O2)"
"$cmake" -S "$source_dir" -B "$scratch/minimal-plugin-debug" -G "$generator" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_C_COMPILER="$c_compiler" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
command_line=$(compile_command "$scratch/minimal-plugin-debug")
echo "$command_line"
if [[ " $command_line " == *" -O2 "* || " $command_line " != *" -g "* ]]; then
  echo "deepx_add_plugin changed the flags of a Debug build" >&2
  exit 1
fi

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
