#!/usr/bin/env bash
# Install the Prometheus, promtool and Alertmanager the tests run against into .tools/ (no
# system change, no root): Prometheus 3.5 LTS and a current Alertmanager, the versions most
# users run, from Debian's testing suite by package name and version. Debian 12's own
# Prometheus 2.42 (scripts/install-system-deps.sh) stays the documented floor.
#
# apt runs with its own sources list and state folders under a temporary directory, only to
# download: it checks each .deb against the suite's signed Packages index, and this script
# checks it again against the sha256 pinned below before `dpkg-deb -x` unpacks it. When the
# suite moves past a pinned version the download fails naming it: bump the three lines below
# (version and sha256 from `apt-cache show PACKAGE` with that suite) and CHANGELOG.md.
set -euo pipefail

SUITE=forky
PACKAGES=(
  "prometheus 3.5.3+ds1-6 593bcced02d8082688ea034dfc543848ad145c5f793aae5aad756c4dbdfa98da"
  "promtool 3.5.3+ds1-6 1fb8bad7b932e7a44bccb12517f0bd96d5d5d83f15d3a1c0e2aa705cbf93fe90"
  "prometheus-alertmanager 0.33.1-5 ec1be21dd7ffeec3d6f42dd1cc8e97b8a9e93888f1953b4fb4cb9234be70185f"
)
# The programs the tests call, and the package each comes in.
BINARIES=(prometheus promtool prometheus-alertmanager amtool)

cd "$(dirname "$0")/.."
TOOLS=.tools
stamp="$TOOLS/.installed"
want=$(printf '%s\n' "${PACKAGES[@]}")
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
for tool in apt-get dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || { echo "install-prometheus: needs $tool (Debian)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
touch "$work/status"
# The Debian mirror this system's apt already uses, with the suite swapped.
# (--no-release-info: read from the sources alone, so it works before any `apt-get update`.)
mirror=$(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' 2>/dev/null \
  | awk '$2 !~ /-/ {print $1; exit}')
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -z "$mirror" ] || [ ! -f "$keyring" ]; then
  echo "install-prometheus: no Debian mirror in apt's sources, or no $keyring" >&2
  exit 1
fi
echo "deb [signed-by=$keyring] $mirror $SUITE main" >"$work/sources.list"
apt=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::State::Status=$work/status" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)

echo "install-prometheus: $(printf '%s ' "${PACKAGES[@]%% *}")from Debian $SUITE into $TOOLS/"
apt-get "${apt[@]}" -qq update
rm -rf "$TOOLS"
mkdir -p "$TOOLS/bin"
for entry in "${PACKAGES[@]}"; do
  read -r name version sha <<<"$entry"
  (cd "$work/debs" && apt-get "${apt[@]}" -qq download "$name=$version")
  deb=$(ls "$work/debs/${name}_"*.deb)
  echo "$sha  $deb" | sha256sum --check --quiet - || {
    echo "install-prometheus: $deb does not match its pinned sha256" >&2
    exit 1
  }
  dpkg-deb -x "$deb" "$TOOLS/root"
  rm "$deb"
done
for binary in "${BINARIES[@]}"; do
  ln -s "../root/usr/bin/$binary" "$TOOLS/bin/$binary"
  "$TOOLS/bin/$binary" --version 2>&1 | head -n 1
done
echo "$want" >"$stamp"
