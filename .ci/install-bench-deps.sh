#!/usr/bin/env bash
# Installs what `make bench` needs on top of .ci/install-deps.sh: Debian's PyTorch (python3-torch,
# 1.13 on Debian 12) and NumPy for /usr/bin/python3, the comparison column of deepx-bench-ops.
# Only those missing; safe to run repeatedly. Kept apart from install-deps.sh because torch is
# large and `make test` does not need it.
set -euo pipefail
bash "$(dirname "$0")/install-deps.sh"
packages=(python3 python3-torch python3-numpy)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deepx: installing missing Debian packages for the benchmarks: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
# A failed install leaves the PyTorch column as "n/a" with the reason; the bench still runs.
if ! { "${sudo_cmd[@]}" apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
  echo "deepx: could not install ${missing[*]}; the PyTorch comparison will say n/a" >&2
fi
