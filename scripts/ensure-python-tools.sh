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
#   (tests/e2e/openapi.rs);
# * moto's server (`moto_server`), an AWS emulator that serves SQS over the
#   real wire protocol, for the sqs sink's conformance fixture
#   (tests/harness/moto.rs).
# Running it again is cheap.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FASTAVRO_VERSION=1.13.1
SCHEMATHESIS_VERSION=4.32.5
MOTO_VERSION=5.2.6

base="$CARGO_TARGET_DIR"
case "$base" in /*) ;; *) base="$WEFT_ROOT/$base" ;; esac
venv="$base/pytools/venv"
# A package that is missing makes m.version raise, which fails the check too;
# flask stands for moto's `server` extra.
check="import sys, fastavro, importlib.metadata as m
sys.exit(fastavro.__version__ != '$FASTAVRO_VERSION' or m.version('schemathesis') != '$SCHEMATHESIS_VERSION'
    or m.version('moto') != '$MOTO_VERSION' or not m.version('flask'))"
if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
    say "installing fastavro $FASTAVRO_VERSION, schemathesis $SCHEMATHESIS_VERSION and moto $MOTO_VERSION (pip, in $venv)"
    ensure_packages python3:python3
    rm -rf "$venv"
    python3 -m venv "$venv" 2>/dev/null || {
        rm -rf "$venv"
        ensure_packages /nonexistent-venv:python3-venv
        python3 -m venv "$venv"
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "fastavro==$FASTAVRO_VERSION" "schemathesis==$SCHEMATHESIS_VERSION" \
        "moto[server]==$MOTO_VERSION" >&2
fi
echo "$venv/bin/python"
