#!/usr/bin/env bash
# Install the Slurm controller and munge the drain tests run for real (Debian packages).
# The tests start their own munged + slurmctld in a temporary directory (private munge
# socket and key, free port) and stop them by PID file, so nothing is started here.
set -euo pipefail
missing=()
for bin in slurmctld:slurmctld scontrol:slurm-client sinfo:slurm-client munged:munge; do
  command -v "${bin%%:*}" >/dev/null 2>&1 || missing+=("${bin##*:}")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "slurm.sh: slurmctld, slurm-client and munge already installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm.sh: need root to apt-get install ${missing[*]}" >&2
  exit 1
fi
packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
echo "slurm.sh: installing $packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $packages
