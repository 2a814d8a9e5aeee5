#!/usr/bin/env bash
# Install Debian's Chromium, which the fleet report page test renders the page in (driven
# by Playwright's Python package with executable_path=/usr/lib/chromium/chromium; no
# browser download). The test starts and stops its own headless browser.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && [ -x /usr/lib/chromium/chromium ]; then
  echo "chromium.sh: chromium already installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "chromium.sh: need root to apt-get install chromium" >&2
  exit 1
fi
echo "chromium.sh: installing chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium
