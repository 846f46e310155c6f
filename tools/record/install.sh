#!/usr/bin/env bash
# Install an engine from carried wheels into its own folder, on a machine with no network.
#
#   tools/record/install.sh WHEELS_DIR SITE_DIR
#
# Every wheel in WHEELS_DIR is installed with no index and no dependency resolution (the
# folder holds exactly the packages the machine lacks, one version each), into SITE_DIR, which
# then goes first on PYTHONPATH so the machine's own torch and CUDA stack are used unchanged.
# A wheel carried in parts (NAME.whl.part-aa, -ab, ...) is joined first and checked against
# NAME.whl.sha256 when that file is there.
set -euo pipefail
wheels=${1:?usage: install.sh WHEELS_DIR SITE_DIR}
site=${2:?usage: install.sh WHEELS_DIR SITE_DIR}
cd "$wheels"
for first in *.part-aa; do
    [ -e "$first" ] || break
    whole=${first%.part-aa}
    cat "$whole".part-* >"$whole"
    rm -f "$whole".part-*
    if [ -e "$whole.sha256" ]; then sha256sum -c "$whole.sha256"; fi
done
cd - >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
echo "installed $(ls "$wheels"/*.whl | wc -l) wheels into $site"
