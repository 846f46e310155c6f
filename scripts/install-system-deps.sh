#!/usr/bin/env bash
# Install the Debian tools the tests run for real (promtool, prometheus, alertmanager, amtool,
# chromium, jsonnet), or with `bench` the ones `make bench` times specwatch beside (mtail, and
# prometheus-node-exporter as the cost of the most common exporter on a node).
# Does nothing when they are present; needs root (or sudo) when they are not.
set -euo pipefail

missing=()
if [ "${1:-}" = "bench" ]; then
  command -v mtail >/dev/null 2>&1 || missing+=(mtail)
  command -v prometheus-node-exporter >/dev/null 2>&1 || missing+=(prometheus-node-exporter)
else
  for tool in prometheus promtool; do
    command -v "$tool" >/dev/null 2>&1 || missing+=(prometheus)
  done
  for tool in prometheus-alertmanager amtool; do
    command -v "$tool" >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
  done
  # Deployment checks: `kubectl kustomize` builds the overlays, `docker-compose config` checks
  # the Compose file, systemd-analyze verifies the unit.
  command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  # The HTML report test opens the page in headless Chromium, as a reader would.
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  # The jsonnet face of the mixin is evaluated as kube-prometheus users evaluate it.
  command -v jsonnet >/dev/null 2>&1 || missing+=(jsonnet)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-system-deps: need root to install: $packages" >&2
    exit 1
  fi
fi
echo "install-system-deps: installing $packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $packages >/dev/null
# The Debian packages start services we do not want holding ports during tests.
for svc in prometheus prometheus-alertmanager prometheus-node-exporter mtail; do
  $sudo systemctl stop "$svc" >/dev/null 2>&1 || true
done
