#!/usr/bin/env bash
# Install the real programs the tests start for themselves (Debian packages):
#   Slurm controller + munge (drain tests), Prometheus + promtool (live pull), the
#   node exporter (serves the drain metrics textfile),
#   PostgreSQL (production MLflow/Prefect stores), Chromium (report page screenshots).
# The tests start each one in a temporary directory on 127.0.0.1 (free port) and stop it
# by PID, so nothing is started here. A test whose program is missing skips with a reason.
set -euo pipefail
missing=()
for bin in slurmctld:slurmctld scontrol:slurm-client sinfo:slurm-client munged:munge \
           prometheus:prometheus promtool:prometheus prometheus-node-exporter:prometheus-node-exporter \
           chromium:chromium \
           /usr/lib/postgresql/15/bin/initdb:postgresql; do
  command -v "${bin%%:*}" >/dev/null 2>&1 || [ -x "${bin%%:*}" ] || missing+=("${bin##*:}")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "services.sh: slurm, munge, prometheus, postgresql and chromium already installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "services.sh: need root to apt-get install ${missing[*]}" >&2
  exit 1
fi
packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
echo "services.sh: installing $packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $packages
