#!/usr/bin/env bash
# Builds every Rust guest crate of the workspace to a WebAssembly component.
#
#   scripts/build-guests.sh            # build all guests
#   scripts/build-guests.sh NAME...    # build only these packages
#
# Guests go to their own target dir, "${CARGO_TARGET_DIR:-target}/guests", so
# that a test running inside `cargo test` can call this script without waiting
# on the host build's lock. Output, one path per line on stdout:
#
#   <target>/guests/wasm32-wasip2/guest/<crate_name>.wasm
#
# Rust's wasm32-wasip2 target links components directly (no adapter step);
# the script checks each output's header and fails if it is a core module.
# Cargo makes a rebuild with nothing changed a no-op, so running this often is
# cheap.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${CARGO_TARGET_DIR:-$root/target}"
case "$base" in /*) ;; *) base="$root/$base" ;; esac
export CARGO_TARGET_DIR="$base/guests"
out_dir="$CARGO_TARGET_DIR/wasm32-wasip2/guest"

# Guest crates: cdylib packages under these folders.
packages=()
if [ "$#" -gt 0 ]; then
    packages=("$@")
else
    for manifest in "$root"/examples/rust/*/Cargo.toml "$root"/plugins/*/Cargo.toml \
        "$root"/host/tests/guests/*/Cargo.toml; do
        [ -f "$manifest" ] || continue
        name="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n 1)"
        [ -n "$name" ] && packages+=("$name")
    done
fi
if [ "${#packages[@]}" -eq 0 ]; then
    echo "build-guests: no guest crates found" >&2
    exit 1
fi

args=()
for package in "${packages[@]}"; do args+=(-p "$package"); done

cargo build --manifest-path "$root/Cargo.toml" --target wasm32-wasip2 --profile guest \
    --quiet "${args[@]}" >&2

for package in "${packages[@]}"; do
    wasm="$out_dir/${package//-/_}.wasm"
    if [ ! -f "$wasm" ]; then
        echo "build-guests: $package built but $wasm is missing (is it a cdylib?)" >&2
        exit 1
    fi
    # A component's preamble is \0asm followed by version 0x0d 0x00 and layer 0x01 0x00.
    if [ "$(od -An -tx1 -j4 -N4 "$wasm" | tr -d ' \n')" != "0d000100" ]; then
        echo "build-guests: $wasm is a core module, not a component" >&2
        exit 1
    fi
    echo "$wasm"
done
