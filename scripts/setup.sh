#!/usr/bin/env bash
# Sets up sigmatrace on Debian 12, idempotently: the system packages it needs (compiler, rdma-core
# headers and utilities, bcc, kernel headers), then .venv with sigmatrace, its Python
# dependencies and its native code.  Safe to run again; it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  python3 python3-venv python3-dev gcc make git ca-certificates procps iproute2 tmux
  libibverbs-dev ibverbs-utils libfabric-bin ucx-utils librdmacm-dev rdmacm-utils perftest
  bpfcc-tools python3-bpfcc libbpfcc linux-headers-amd64
  binutils linux-perf
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's python3 (the one python3-bpfcc is built for) runs the virtual environment.
PY=/usr/bin/python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
echo "setup: installing sigmatrace into .venv (builds the native code)"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

# bcc has no real PyPI release: expose Debian's module, and only it, to the venv.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p .venv/debian-bcc
ln -sfn /usr/lib/python3/dist-packages/bcc .venv/debian-bcc/bcc
echo "$PWD/.venv/debian-bcc" > "$site/debian-bcc.pth"

echo "setup: done ($(.venv/bin/sigmatrace --version))"
