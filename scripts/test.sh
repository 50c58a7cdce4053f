#!/usr/bin/env bash
# Installs what weft's tests need on a fresh machine, then runs the whole
# suite: formatting, lints, unit tests, and end-to-end tests against real
# services (throwaway Postgres clusters, real wasmtime).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$WEFT_ROOT"

say "checking system packages"
ensure_packages gcc:build-essential make:build-essential pkg-config:pkg-config python3:python3 curl:curl openssl:openssl \
    /usr/include/openssl/ssl.h:libssl-dev nats-server:nats-server \
    /usr/lib/rabbitmq/bin/rabbitmq-server:rabbitmq-server
ensure_postgres
ensure_rust
ensure_tansu
ensure_redis

say "building the WebAssembly guests"
scripts/build-guests.sh

# The even-id filter in Rust, JavaScript, Python and C (tests/e2e/languages.rs);
# installs the pinned toolchains under the build cache the first time.
say "building the four-language examples"
scripts/build-examples.sh

# fastavro (the avro-encode plugin's test decodes with it) and schemathesis
# (the API fuzz test).
say "installing the Python test tools"
scripts/ensure-python-tools.sh >/dev/null

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy"
cargo clippy --all-targets -- -D warnings
cargo clippy -p weft-sdk-guest --all-features --all-targets -- -D warnings

# The host (the default member), then the guest SDK's unit and doc tests,
# which run natively: the workspace's guests are otherwise only built for
# wasm32-wasip2.
say "cargo test"
# Then the sinks crate with one sink type's feature, which proves that each
# type can be left out of a build.
{ cargo test && cargo test -p weft-sdk-guest --all-features &&
    cargo test -p weft-sinks --no-default-features --features nats; } 2>&1 |
    tee "${TMPDIR:-/tmp}/weft-test.log"

# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "${TMPDIR:-/tmp}/weft-test.log"
