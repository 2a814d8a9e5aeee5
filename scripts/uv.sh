#!/usr/bin/env bash
# Run uv, installing it first with pip if this machine has none (fresh machines don't).
# uv uses the machine's CPython (>= 3.11): it cannot download interpreters here, so a
# mismatch fails fast instead of hanging on a download.
set -euo pipefail
export UV_PYTHON_DOWNLOADS=never
if command -v uv >/dev/null 2>&1; then
  exec uv "$@"
fi
if ! python3 -m uv --version >/dev/null 2>&1; then
  echo "uv not found: installing it with pip" >&2
  python3 -m pip install --quiet uv >&2
fi
exec python3 -m uv "$@"
