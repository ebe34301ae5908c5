#!/bin/sh
# CTest example_c_client_remote: the C client example run against a real deepxd.
# usage: run_remote.sh DEEPXD CLIENT PLUGIN
# Starts DEEPXD on a socket in a fresh temporary directory serving PLUGIN, runs
# `CLIENT --connect unix:SOCKET` (which must say it ran in that daemon), then stops the daemon
# with SIGTERM (it drains and exits 0).
set -u
deepxd=$1 client=$2 plugin=$3
[ -x "$deepxd" ] || { echo "run_remote.sh: no deepxd at $deepxd (build the target deepxd)" >&2; exit 1; }
dir=$(mktemp -d) || exit 1
socket="$dir/deepxd.sock"
"$deepxd" --socket "$socket" --plugin "$plugin" --log-level warn &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap stop EXIT
i=0
while [ ! -S "$socket" ]; do
  i=$((i + 1))
  if [ "$i" -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "run_remote.sh: deepxd did not listen on $socket" >&2
    exit 1
  fi
  sleep 0.05
done
output=$("$client" --connect "unix:$socket") || { echo "$output"; exit 1; }
echo "$output"
# The result must come from the daemon, not from a client that ignored --connect.
case $output in
  *"in deepxd at unix:$socket"*) ;;
  *) echo "run_remote.sh: the client did not report running in deepxd" >&2; exit 1 ;;
esac
