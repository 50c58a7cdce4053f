#!/usr/bin/env bash
# Installs the Python tools the tests use (PyPI, pinned) in a venv under the
# build cache and prints the venv's python on stdout:
#
#   scripts/ensure-python-tools.sh   ->   <cache>/pytools/venv/bin/python
#
# <cache> is ${CARGO_TARGET_DIR:-$HOME/.cache/weft/target}. The tools:
# * fastavro, an independent Avro implementation that decodes the
#   avro-encode plugin's output (tests/e2e/first_party.rs);
# * schemathesis, which fuzzes the API from its OpenAPI document
#   (tests/e2e/openapi.rs).
# Running it again is cheap.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FASTAVRO_VERSION=1.13.1
SCHEMATHESIS_VERSION=4.32.5

base="$CARGO_TARGET_DIR"
case "$base" in /*) ;; *) base="$WEFT_ROOT/$base" ;; esac
venv="$base/pytools/venv"
check="import sys, fastavro, importlib.metadata as m
sys.exit(fastavro.__version__ != '$FASTAVRO_VERSION' or m.version('schemathesis') != '$SCHEMATHESIS_VERSION')"
if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
    say "installing fastavro $FASTAVRO_VERSION and schemathesis $SCHEMATHESIS_VERSION (pip, in $venv)"
    ensure_packages python3:python3
    rm -rf "$venv"
    python3 -m venv "$venv" 2>/dev/null || {
        rm -rf "$venv"
        ensure_packages /nonexistent-venv:python3-venv
        python3 -m venv "$venv"
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "fastavro==$FASTAVRO_VERSION" "schemathesis==$SCHEMATHESIS_VERSION" >&2
fi
echo "$venv/bin/python"
