#!/usr/bin/env bash
# What `make run` runs after the build: certifies the bundled CPU plugin against the reference
# (deepx certify cpu), runs the MLP example and the training example through the host in-process,
# then starts deepxd on a temporary socket, runs the C client and the MLP example against it
# (their results must equal the in-process ones) and stops it with SIGTERM (it must drain and exit
# 0). Ends with a short summary: the verdict, the cases by tier, the time, where the full report
# is, each example's result. Exits non-zero when any step fails.
#   .ci/make-run.sh BUILD_DIR
set -uo pipefail
build="${1:?usage: .ci/make-run.sh BUILD_DIR}"
bin="$build/bin"
out="$build/certification"
logs="$build/run"
mkdir -p "$logs"

step() { printf '\n== %s ==\n' "$*"; }

# Each step's stdout is shown and kept under $logs for the summary.
step "1/4 certification: deepx certify cpu --out $out"
"$bin/deepx" certify cpu --out "$out" | tee "$logs/certify.txt"
certify_rc=${PIPESTATUS[0]}
step "2/4 example: deepx-example-mlp (a forward pass through the host, cpu vs reference)"
"$bin/deepx-example-mlp" | tee "$logs/mlp.txt"
mlp_rc=${PIPESTATUS[0]}
step "3/4 example: deepx-example-train (training through the host, cpu vs reference)"
"$bin/deepx-example-train" | tee "$logs/train.txt"
train_rc=${PIPESTATUS[0]}

# The daemon: its own socket in a private temporary directory, the plugins from the command line
# (a client never names a plugin path), stopped with SIGTERM at the end whatever happens.
plugins="$build/lib/deepx/plugins"
sock_dir=$(mktemp -d "${TMPDIR:-/tmp}/deepx-run.XXXXXX")
sock="$sock_dir/deepxd.sock"
deepxd_pid=""
stop_deepxd() {
  if [[ -n $deepxd_pid ]] && kill -0 "$deepxd_pid" 2>/dev/null; then
    kill -TERM "$deepxd_pid" 2>/dev/null
    wait "$deepxd_pid"
    deepxd_rc=$?
  fi
  deepxd_pid=""
}
cleanup() { stop_deepxd; rm -rf "$sock_dir"; }
trap cleanup EXIT
step "4/4 deepxd: the C client and the MLP example against a daemon on $sock"
"$bin/deepxd" --socket "$sock" --plugin "$plugins/libdeepx-plugin-cpu.so" \
  --plugin "$plugins/libdeepx-plugin-reference.so" --log-level warn 2>"$logs/deepxd.log" &
deepxd_pid=$!
deepxd_rc=""
for _ in $(seq 100); do [[ -S $sock ]] && break; kill -0 "$deepxd_pid" 2>/dev/null || break; sleep 0.1; done
"$bin/deepx-example-c-client" >"$logs/c-client.txt" 2>&1
client_local_rc=$?
"$bin/deepx-example-c-client" --connect "unix:$sock" | tee "$logs/c-client-remote.txt"
client_rc=${PIPESTATUS[0]}
"$bin/deepx-example-mlp" --connect "unix:$sock" | tee "$logs/mlp-remote.txt"
mlp_remote_rc=${PIPESTATUS[0]}
stop_deepxd
# The same numbers as in-process: the C client's whole output, the MLP's first-row probabilities.
same() { if cmp -s <(grep -E "$3" "$1") <(grep -E "$3" "$2"); then echo "same as in-process"; else echo "DIFFERENT from in-process"; fi; }
client_same=$(same "$logs/c-client.txt" "$logs/c-client-remote.txt" ' = ')
mlp_same=$(same "$logs/mlp.txt" "$logs/mlp-remote.txt" '^  (row 0|probabilities)')

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
remote_rc=0
if [[ $client_local_rc -ne 0 || $client_rc -ne 0 || $mlp_remote_rc -ne 0 || $deepxd_rc != 0 ||
      $client_same != "same as in-process" || $mlp_same != "same as in-process" ]]; then
  remote_rc=1
fi
printf '%-22s %s\n' "through deepxd" "c-client: $(result "$logs/c-client-remote.txt" "$client_rc"), $client_same"
printf '%-22s %s\n' "" "mlp: $(result "$logs/mlp-remote.txt" "$mlp_remote_rc"), $mlp_same"
printf '%-22s %s\n' "" "deepxd: $(if [[ $deepxd_rc == 0 ]]; then echo "drained and exited 0 on SIGTERM"; else echo "exit ${deepxd_rc:-?} (log: $logs/deepxd.log)"; fi)"
if [[ $certify_rc -ne 0 || $mlp_rc -ne 0 || $train_rc -ne 0 || $remote_rc -ne 0 ]]; then
  echo "make run: FAILED"
  exit 1
fi
echo "make run: OK"
