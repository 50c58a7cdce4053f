#!/usr/bin/env bash
# Installs Python's fastavro (PyPI, pinned) in a venv under the build cache
# and prints the venv's python on stdout:
#
#   scripts/ensure-fastavro.sh   ->   <cache>/pyavro/venv/bin/python
#
# <cache> is ${CARGO_TARGET_DIR:-$HOME/.cache/weft/target}. The avro-encode
# plugin's test (tests/e2e/first_party.rs) decodes its output with this
# independent Avro implementation. Running it again is cheap.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FASTAVRO_VERSION=1.13.1

base="$CARGO_TARGET_DIR"
case "$base" in /*) ;; *) base="$WEFT_ROOT/$base" ;; esac
venv="$base/pyavro/venv"
if ! "$venv/bin/python" -c "import fastavro, sys; sys.exit(fastavro.__version__ != '$FASTAVRO_VERSION')" 2>/dev/null; then
    say "installing fastavro $FASTAVRO_VERSION (pip, in $venv)"
    ensure_packages python3:python3
    rm -rf "$venv"
    python3 -m venv "$venv" 2>/dev/null || {
        rm -rf "$venv"
        ensure_packages /nonexistent-venv:python3-venv
        python3 -m venv "$venv"
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "fastavro==$FASTAVRO_VERSION" >&2
fi
echo "$venv/bin/python"
