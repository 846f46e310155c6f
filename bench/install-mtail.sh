#!/usr/bin/env bash
# Install Debian's mtail for `make bench`, which times specwatch beside it.
# Does nothing when it is present; needs root (or sudo) when it is not.
set -euo pipefail
command -v mtail >/dev/null 2>&1 && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-mtail: need root to install mtail" >&2
    exit 1
  fi
fi
echo "install-mtail: installing mtail"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends mtail >/dev/null
# The package starts a service that would hold mtail's port.
$sudo systemctl stop mtail >/dev/null 2>&1 || true
