#!/bin/sh
# abi_baseline.sh check|update BASELINE_DIR WORK_DIR HOST_LIB SURFACE_LIB ABI_HEADERS
#                 DLPACK_HEADERS [SKIP_REASON]
#
# check:  abidw the built libraries, compare each with its baseline in BASELINE_DIR (abidiff),
#         print the report; exit 1 on an incompatible change, 77 (CTest's skip code) when the
#         check cannot run here, 0 otherwise. This is the CTest `abi_baseline`.
# update: write the baselines: the target `abi-baseline-update`, run on purpose by a minor.
#
# Two corpora, one per side of the ABI:
#   libdeepx_host.abi    what libdeepx_host.so exports: the client API (deepx/host.h,
#                        deepx/safetensors.h), its signatures and every type they reach;
#   plugin_surface.abi   every struct, enum and typedef of the public headers, through
#                        libdeepx_abi_surface.so (abi_surface.c): the plugin side, for which
#                        the host exports no function.
set -u

mode=${1:-}
baseline_dir=${2:-}
work_dir=${3:-}
host_lib=${4:-}
surface_lib=${5:-}
abi_headers=${6:-}
dlpack_headers=${7:-}
skip_reason=${8:-}
here=$(cd "$(dirname "$0")" && pwd)

if { [ "$mode" != check ] && [ "$mode" != update ]; } || [ -z "$dlpack_headers" ]; then
  echo "usage: $0 check|update BASELINE_DIR WORK_DIR HOST_LIB SURFACE_LIB ABI_HEADERS" \
       "DLPACK_HEADERS [SKIP_REASON]" >&2
  exit 2
fi
if [ -n "$skip_reason" ]; then
  if [ "$mode" = update ]; then
    echo "abi_baseline: cannot record the baseline from this build: $skip_reason" >&2
    exit 1
  fi
  echo "abi_baseline: SKIPPED: $skip_reason"
  exit 77
fi
for tool in abidw abidiff perl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$mode" = update ]; then
      echo "abi_baseline: '$tool' not found; install Debian's abigail-tools" \
           "(.ci/install-deps.sh does)" >&2
      exit 1
    fi
    echo "abi_baseline: SKIPPED: '$tool' not found; install Debian's abigail-tools" \
         "(.ci/install-deps.sh does) to check the ABI against abi/baseline/"
    exit 77
  fi
done

# dump CORPUS LIB OUT.abi [--no-show-locs]
# What abidw records, and nothing that depends on the machine: no path of the library
# (--no-corpus-path), of the build directory (--no-comp-dir-path) or of a source (--short-locs
# keeps file names only), no DT_NEEDED list (--no-elf-needed: libstdc++ and friends are not the
# deepx ABI). The baselines also leave out source locations (--no-show-locs): line numbers
# move with every comment and would bury a minor's real change in the diff of the baseline;
# the build's side keeps them, so that the reports say where a change is.
# libdeepx_host.so is C++: abidw keeps only what its exported functions reach
# (--exported-interfaces-only), makes every type not defined in a public header opaque
# (--headers-dir, --drop-private-types: the host's own definitions of dx_error, dx_runtime, ...
# become the declarations a client sees) and drops the C++ runtime's exports and types
# (host-private.suppr), so that the corpus is the C ABI and nothing else.
dump() {
  dump_corpus=$1 dump_lib=$2 dump_out=$3
  shift 3
  if [ "$dump_corpus" = libdeepx_host ]; then
    set -- "$@" --exported-interfaces-only --headers-dir "$abi_headers" \
      --headers-dir "$dlpack_headers" --drop-private-types \
      --suppressions "$here/host-private.suppr"
  fi
  if ! abidw --no-corpus-path --no-comp-dir-path --no-elf-needed --short-locs "$@" \
       --out-file "$dump_out" "$dump_lib"; then
    echo "abi_baseline: abidw failed on $dump_lib" >&2
    return 1
  fi
}

# Every struct, enum and typedef of the public headers must have its line in abi_surface.c,
# or plugin_surface.abi would silently leave it out.
public_types=$(perl -0777 -ne '
  while (/\}\s*(dx_\w+)\s*;/g) { $n{$1} = 1 }                                   # struct, enum
  while (/typedef\s+(?:struct|enum)\s+\w+\s*\*?\s*(dx_\w+)\s*;/g) { $n{$1} = 1 }  # opaque
  while (/typedef\s+(?:unsigned\s+)?\w+\s+(dx_\w+)\s*;/g) { $n{$1} = 1 }          # scalar
  while (/typedef[^;{}]*?\(\s*\*\s*(dx_\w+)\s*\)/g) { $n{$1} = 1 }               # function
  END { print join(" ", sort keys %n) }' "$abi_headers"/*.h) || exit 1
for name in $public_types; do
  if ! grep -q "($name)" "$here/abi_surface.c"; then
    echo "abi_baseline: FAILED: abi/baseline/abi_surface.c has no line for $name, declared in" \
         "$abi_headers: add one (DX_SURFACE_STRUCT, _HANDLE or _VALUE) so the baseline covers it"
    exit 1
  fi
done

status=0
mkdir -p "$work_dir" || exit 1
for corpus in libdeepx_host plugin_surface; do
  if [ "$corpus" = libdeepx_host ]; then lib=$host_lib; else lib=$surface_lib; fi
  baseline=$baseline_dir/$corpus.abi
  if [ ! -f "$lib" ]; then
    echo "abi_baseline: $lib is not built" >&2
    exit 1
  fi
  if [ "$mode" = update ]; then
    dump "$corpus" "$lib" "$baseline" --no-show-locs || exit 1
    echo "abi_baseline: wrote $baseline"
    continue
  fi

  if [ ! -f "$baseline" ]; then
    echo "abi_baseline: FAILED: no baseline $baseline (the target abi-baseline-update writes it)"
    status=1
    continue
  fi
  current=$work_dir/$corpus.abi
  normalized=$work_dir/$corpus.normalized.abi
  dump "$corpus" "$lib" "$current" || exit 1
  perl "$here/abi_normalize.pl" "$baseline" "$current" > "$normalized" || exit 1

  # abidiff's exit status is a bit set: 1 error, 2 usage error, 4 ABIDIFF_ABI_CHANGE,
  # 8 ABIDIFF_ABI_INCOMPATIBLE_CHANGE. Bit 8 alone is not enough: abidiff sets it for a removed
  # function or variable, but a function whose parameter or return type changed, or a struct
  # whose field moved, sets only bit 4, the bit an added function or an appended field sets
  # too. So the changes a minor may make are taken out first: added functions and variables by
  # allowed-changes.suppr, fields appended to growable structs and the *_COUNT_ enum sentinels
  # by abi_normalize.pl (added enumerators are harmless to abidiff already). Whatever abidiff
  # still reports is no minor's change: any bit set fails the test.
  abidiff --no-default-suppression --suppressions "$here/allowed-changes.suppr" \
    "$baseline" "$normalized" > /dev/null 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    if [ $((rc & 3)) -ne 0 ]; then
      echo "abi_baseline: FAILED: abidiff failed on $corpus (exit status $rc):"
      abidiff --no-default-suppression "$baseline" "$normalized"
    else
      echo "abi_baseline: FAILED: $corpus: incompatible ABI change against" \
           "abi/baseline/$corpus.abi (abidiff exit status $rc; a major version)."
      echo "What no minor may do (fields appended to growable structs and added functions" \
           "taken out; a field pushed past the end of its struct shows as deleted):"
      abidiff --no-default-suppression --suppressions "$here/allowed-changes.suppr" \
        --leaf-changes-only --impacted-interfaces "$baseline" "$normalized" \
        > "$work_dir/$corpus.report" 2>&1
      cat "$work_dir/$corpus.report"
      abidiff --no-default-suppression --leaf-changes-only --impacted-interfaces --harmless \
        "$baseline" "$current" > "$work_dir/$corpus.whole" 2>&1
      if ! cmp -s "$work_dir/$corpus.report" "$work_dir/$corpus.whole"; then
        echo "The whole difference between abi/baseline/$corpus.abi and this build:"
        cat "$work_dir/$corpus.whole"
      fi
    fi
    status=1
    continue
  fi
  # Compatible. Say whether the build adds to the baseline (a minor version records that in the
  # same commit: cmake --build build/default --target abi-baseline-update).
  abidiff --no-default-suppression --leaf-changes-only --harmless "$baseline" "$current" \
    > "$work_dir/$corpus.additions" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "abi_baseline: $corpus: same ABI as abi/baseline/$corpus.abi"
  elif [ $((rc & 3)) -ne 0 ]; then
    echo "abi_baseline: FAILED: abidiff failed on $corpus (exit status $rc):"
    cat "$work_dir/$corpus.additions"
    status=1
  else
    echo "abi_baseline: $corpus: compatible with abi/baseline/$corpus.abi, with additions" \
         "it does not record yet (a minor version records them in the same commit:" \
         "cmake --build build/default --target abi-baseline-update):"
    cat "$work_dir/$corpus.additions"
  fi
done
exit $status
