#!/usr/bin/env bash
# Installs what `make bench` needs: Debian's PyTorch (python3-torch, 1.13 on Debian 12) and NumPy
# for /usr/bin/python3, the comparison column of deepx-bench-ops. Both are among the packages of
# .ci/install-deps.sh (the Python binding's tests use them too), which installs only those
# missing, so this runs it; `make bench` keeps this name for what the benchmarks need. Where
# PyTorch cannot be imported the bench still runs and its PyTorch column says "n/a" with the reason.
set -euo pipefail
exec bash "$(dirname "$0")/install-deps.sh"
