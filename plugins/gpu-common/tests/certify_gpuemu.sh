#!/usr/bin/env bash
# Certifies the emulated GPU plugin with deepx-certify and passes when every case passed or
# failed for one of the runner/reference defects known at the time of writing (each printed):
#  - "(0 ulp, abs 0)" FAILs: the runner's error bound uses signed term sums (integer dx.mean,
#    the gradients of dx.sub / dx.div / dx.reciprocal), so exact results fail a negative bound;
#  - HARNESS_ERRORs where "the reference forward failed" on a case the reference documents as
#    valid or as an expected error (dx.softmax of a rank-0 tensor, dx.cast backward with a bogus
#    dtype attribute).
# Any other failure (a wrong value, a crash, an unexpected status) fails the test.
#   certify_gpuemu.sh DEEPX_CERTIFY PLUGIN OUT_DIR
set -uo pipefail
certify="$1"; plugin="$2"; out="$3"
log="$out.txt"
mkdir -p "$out"
"$certify" "$plugin" --quiet --out "$out" > "$log" 2>&1
rc=$?
grep -E "^tests:|^verdict" "$log"
if ! grep -q "^tests:" "$log"; then
  echo "deepx-certify did not run (exit $rc):"; tail -20 "$log"; exit 1
fi
failures="$(grep -E "^  (FAIL|HARNESS_ERROR|CRASH|TIMEOUT|UNIMPLEMENTED) [0-9a-f]{12}:" "$log")"
pattern="\(0 ulp, abs 0\)|the reference forward failed: [A-Z_]+ \(dx\.(softmax: axis -1 out of range for rank 0|cast \(plugin 'reference'\): dx\.cast: attribute 'dtype' disagrees)"
known="$(echo "$failures" | grep -E "$pattern" || true)"
unknown="$(echo "$failures" | grep -vE "$pattern" | grep -v "^$" || true)"
echo "known runner/reference defects: $(echo -n "$known" | grep -c . || true) cases"
if [ -n "$unknown" ]; then
  echo "unexplained failures:"
  grep -A1 -E "^  (FAIL|HARNESS_ERROR|CRASH|TIMEOUT|UNIMPLEMENTED) [0-9a-f]{12}:" "$log" \
    | grep -vE "$pattern" | head -40
  exit 1
fi
passed="$(sed -nE 's/^tests: [0-9]+ passed: ([0-9]+).*/\1/p' "$log")"
if [ "${passed:-0}" -lt 20000 ]; then echo "too few cases passed: $passed"; exit 1; fi
exit 0
