#!/usr/bin/env bash
# What `make run` runs after the build: certifies the bundled CPU plugin against the reference
# (deepx certify cpu), runs the MLP example and the training example through the host, and ends
# with a short summary of the three: the verdict, the cases by tier, the time, where the full
# report is, and each example's result. Exits non-zero when any of the three fails.
#   .ci/make-run.sh BUILD_DIR
set -uo pipefail
build="${1:?usage: .ci/make-run.sh BUILD_DIR}"
bin="$build/bin"
out="$build/certification"
logs="$build/run"
mkdir -p "$logs"

step() { printf '\n== %s ==\n' "$*"; }

# Each step's stdout is shown and kept under $logs for the summary.
step "1/3 certification: deepx certify cpu --out $out"
"$bin/deepx" certify cpu --out "$out" | tee "$logs/certify.txt"
certify_rc=${PIPESTATUS[0]}
step "2/3 example: deepx-example-mlp (a forward pass through the host, cpu vs reference)"
"$bin/deepx-example-mlp" | tee "$logs/mlp.txt"
mlp_rc=${PIPESTATUS[0]}
step "3/3 example: deepx-example-train (training through the host, cpu vs reference)"
"$bin/deepx-example-train" | tee "$logs/train.txt"
train_rc=${PIPESTATUS[0]}

# The value of the first "KEY: ..." line of a log, without the key.
field() { sed -n "s/^$2: //p" "$1" | head -n 1; }
# An example's verdict: its last PASS/FAIL line up to the first ';', else its exit status.
result() {
  local line
  line=$(grep -E '^(PASS|FAIL)' "$1" | tail -n 1 | cut -d ';' -f 1)
  if [[ $2 -ne 0 ]]; then echo "FAILED (exit $2)${line:+: $line}"; else echo "${line:-finished (exit 0)}"; fi
}

verdict=$(field "$logs/certify.txt" verdict)
step "summary"
if [[ -n $verdict ]]; then
  printf '%-22s %s\n' "certification of cpu" "$verdict"
  printf '%-22s %s\n' "  cases" "$(field "$logs/certify.txt" cases)"
  printf '%-22s %s\n' "  time" "$(field "$logs/certify.txt" time | cut -d ' ' -f 1-2)"
  printf '%-22s %s\n' "  full report" "$out/report.html (also report.json, junit.xml)"
else
  printf '%-22s %s\n' "certification of cpu" "did not finish (exit $certify_rc): see its messages above"
fi
printf '%-22s %s\n' "deepx-example-mlp" "$(result "$logs/mlp.txt" "$mlp_rc")"
printf '%-22s %s\n' "deepx-example-train" "$(result "$logs/train.txt" "$train_rc")"
if [[ $certify_rc -ne 0 || $mlp_rc -ne 0 || $train_rc -ne 0 ]]; then
  echo "make run: FAILED"
  exit 1
fi
echo "make run: OK"
