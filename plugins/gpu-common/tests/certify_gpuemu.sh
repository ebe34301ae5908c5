#!/usr/bin/env bash
# Certifies the emulated GPU plugin (the GPU kernel source built with g++ against a host-memory
# stand-in for the GPU runtime) with deepx-certify against the reference. Passes only when the
# verdict is CERTIFIED (every case passed or was MISTRUSTED) and a realistic number of cases
# ran; any FAIL, HARNESS_ERROR, CRASH, TIMEOUT or UNIMPLEMENTED fails the test, with its line.
#   certify_gpuemu.sh DEEPX_CERTIFY PLUGIN OUT_DIR [CASE_TIMEOUT_SECONDS]
set -uo pipefail
certify="$1"; plugin="$2"; out="$3"
timeout_args=()
if [ -n "${4:-}" ]; then timeout_args=(--timeout "$4"); fi
log="$out.txt"
mkdir -p "$out"
"$certify" "$plugin" --quiet --out "$out" "${timeout_args[@]}" > "$log" 2>&1
rc=$?
grep -E "^tests:|^verdict" "$log"
if ! grep -q "^tests:" "$log"; then
  echo "deepx-certify did not run (exit $rc):"; tail -20 "$log"; exit 1
fi
if [ "$rc" -ne 0 ] || ! grep -q "^verdict: CERTIFIED" "$log"; then
  echo "not certified (exit $rc); failures:"
  grep -A1 -E "^  (FAIL|HARNESS_ERROR|CRASH|TIMEOUT|UNIMPLEMENTED) [0-9a-f]{12}:" "$log" | head -40
  exit 1
fi
passed="$(sed -nE 's/^tests: [0-9]+ passed: ([0-9]+).*/\1/p' "$log")"
if [ "${passed:-0}" -lt 20000 ]; then echo "too few cases passed: $passed"; exit 1; fi
exit 0
