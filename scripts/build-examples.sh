#!/usr/bin/env bash
# Builds the even-id filter example in four languages (examples/{rust,js,
# python,c}/even-filter) to WebAssembly components, installing the pinned
# toolchains it needs when they are missing:
#
#   scripts/build-examples.sh
#
# Output, one path per line on stdout, in this order (rust, js, python, c):
#
#   <cache>/examples/out/even_filter_<lang>.wasm
#
# <cache> is ${CARGO_TARGET_DIR:-$HOME/.cache/weft/target}. Every tool lives
# under <cache>/examples, never in the git tree, and is reused when present:
#
#   tools/bin     wasm-tools, wit-bindgen (cargo_install_tool, scripts/lib.sh)
#   npm/          @bytecodealliance/componentize-js (npm ci of the lock in
#                 examples/js/even-filter)
#   venv/         componentize-py (pip, exact version)
#   adapter/      the WASI preview1 reactor adapter, written out of the
#                 crates.io crate wasi-preview1-component-adapter-provider
#   c/            wit-bindgen's C bindings and the core module
#   toolchain.env the tools' paths, one `key=path` a line; `weft plugin
#                 build` reads it to build plugin projects the same way
#
# System packages (apt, via scripts/lib.sh): clang, lld, wasi-libc and the
# wasm32 compiler-rt for C; nodejs and npm; python3 with venv.
#
# A component is rebuilt only when its sources, wit/ or this script are newer
# than it, so running the script again is cheap.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Pinned tool versions. The adapter matches the host's wasmtime (Cargo.lock).
WASM_TOOLS_VERSION=1.263.0
WIT_BINDGEN_CLI_VERSION=0.63.0
ADAPTER_PROVIDER_VERSION=48.0.8
COMPONENTIZE_JS_VERSION=0.23.0
COMPONENTIZE_PY_VERSION=0.25.1

base="$CARGO_TARGET_DIR"
case "$base" in /*) ;; *) base="$WEFT_ROOT/$base" ;; esac
cache="$base/examples"
tools="$cache/tools"
out="$cache/out"
wit="$WEFT_ROOT/wit"
mkdir -p "$tools" "$out"

# stale OUTPUT INPUT... is true when OUTPUT is missing or an input (file or
# directory tree) has a file newer than it.
stale() {
    local output="$1"
    shift
    [ -f "$output" ] || return 0
    [ -n "$(find "$@" "${BASH_SOURCE[0]}" -newer "$output" -type f -print -quit)" ]
}

# check_component FILE fails unless FILE starts with a component's preamble.
check_component() {
    if [ "$(od -An -tx1 -j4 -N4 "$1" | tr -d ' \n')" != "0d000100" ]; then
        die "build-examples: $1 is not a component"
    fi
}

# cargo_tool BIN CRATE VERSION [cargo install args...] installs CRATE into
# $tools unless $tools/bin/BIN already reports VERSION.
cargo_tool() {
    local bin="$1" crate="$2" version="$3"
    shift 3
    if [ -x "$tools/bin/$bin" ] && "$tools/bin/$bin" --version 2>/dev/null | grep -q "$version"; then
        return 0
    fi
    say "installing $crate $version (cargo install; several minutes once)"
    CARGO_TARGET_DIR="$tools/build" cargo_install_tool --quiet --root "$tools" \
        "$crate" --version "$version" "$@" >&2
    rm -rf "$tools/build" # ~700 MB of intermediate files, not needed again
}

say "checking the examples' toolchains"
ensure_rust
ensure_packages clang:clang wasm-ld:lld /usr/lib/wasm32-wasi/libc.a:wasi-libc \
    node:nodejs npm:npm python3:python3
# clang links the wasm32 compiler-rt builtins, at a path that names clang's
# version.
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a" >/dev/null ||
    ensure_packages /nonexistent-builtins:libclang-rt-dev-wasm32

# Only the subcommands we use: `component new|embed|wit`, `validate`, `print`.
cargo_tool wasm-tools wasm-tools "$WASM_TOOLS_VERSION" \
    --no-default-features --features component,validate,print
cargo_tool wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_CLI_VERSION" --no-default-features --features c

# The JS example's package.json and package-lock.json pin componentize-js
# and everything it pulls in; `npm ci` installs exactly that lock.
npm_dir="$cache/npm"
js_src="$WEFT_ROOT/examples/js/even-filter"
componentize_js="$npm_dir/node_modules/.bin/componentize-js"
if ! [ -x "$componentize_js" ] || ! cmp -s "$js_src/package-lock.json" "$npm_dir/package-lock.json"; then
    say "installing @bytecodealliance/componentize-js $COMPONENTIZE_JS_VERSION (npm ci)"
    rm -rf "$npm_dir"
    mkdir -p "$npm_dir"
    cp "$js_src/package.json" "$js_src/package-lock.json" "$npm_dir/"
    (cd "$npm_dir" && npm ci --silent --no-audit --no-fund >&2)
fi
[ "$("$componentize_js" --version)" = "$COMPONENTIZE_JS_VERSION" ] ||
    die "componentize-js is not $COMPONENTIZE_JS_VERSION: update examples/js/even-filter/package.json and its lock"

venv="$cache/venv"
if ! [ -x "$venv/bin/componentize-py" ] ||
    ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY_VERSION"; then
    say "installing componentize-py $COMPONENTIZE_PY_VERSION (pip, in $venv)"
    python3 -m venv "$venv" 2>/dev/null || {
        rm -rf "$venv"
        ensure_packages /nonexistent-venv:python3-venv
        python3 -m venv "$venv"
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "componentize-py==$COMPONENTIZE_PY_VERSION" >&2
fi

# The adapter: a throwaway crate that depends on the provider crate and
# writes the reactor adapter's bytes out.
adapter="$cache/adapter/wasi_snapshot_preview1.reactor.$ADAPTER_PROVIDER_VERSION.wasm"
if ! [ -f "$adapter" ]; then
    say "extracting the WASI preview1 reactor adapter $ADAPTER_PROVIDER_VERSION (crates.io)"
    mkdir -p "$cache/adapter/src"
    cat >"$cache/adapter/Cargo.toml" <<EOF
[package]
name = "write-adapter"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
wasi-preview1-component-adapter-provider = "=$ADAPTER_PROVIDER_VERSION"
EOF
    cat >"$cache/adapter/src/main.rs" <<'EOF'
fn main() {
    let path = std::env::args().nth(1).expect("output path");
    std::fs::write(
        path,
        wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
    )
    .expect("write the adapter");
}
EOF
    CARGO_TARGET_DIR="$cache/adapter/target" cargo run --quiet \
        --manifest-path "$cache/adapter/Cargo.toml" -- "$adapter.tmp" >&2
    mv "$adapter.tmp" "$adapter"
fi

# The toolchain's paths, for `weft plugin build` (host/src/plugin_project):
# it runs the commands below on scaffolded projects with these tools.
cat >"$cache/toolchain.env.tmp" <<EOF
componentize_js=$componentize_js
componentize_py=$venv/bin/componentize-py
wit_bindgen=$tools/bin/wit-bindgen
wasm_tools=$tools/bin/wasm-tools
wasi_adapter=$adapter
EOF
mv "$cache/toolchain.env.tmp" "$cache/toolchain.env"

# Rust: the workspace crate, built like every other guest.
rust_src="$WEFT_ROOT/examples/rust/even-filter"
say "building the Rust example"
rust_wasm="$("$WEFT_ROOT/scripts/build-guests.sh" weft-even-filter)"
if ! cmp -s "$rust_wasm" "$out/even_filter_rust.wasm"; then cp "$rust_wasm" "$out/even_filter_rust.wasm"; fi

# JavaScript: componentize-js (StarlingMonkey, SpiderMonkey in WASM). The
# sandbox grants no HTTP, so the fetch/HTTP support is left out.
if stale "$out/even_filter_js.wasm" "$js_src" "$wit"; then
    say "building the JavaScript example"
    "$componentize_js" "$js_src/even-filter.js" --wit "$wit" --world-name filter \
        --disable http fetch-event -o "$out/even_filter_js.wasm.tmp" >&2
    mv "$out/even_filter_js.wasm.tmp" "$out/even_filter_js.wasm"
fi

# Python: componentize-py (CPython in WASM, snapshotted after import).
py_src="$WEFT_ROOT/examples/python/even-filter"
if stale "$out/even_filter_python.wasm" "$py_src" "$wit"; then
    say "building the Python example"
    "$venv/bin/componentize-py" -d "$wit" -w filter componentize -p "$py_src" app \
        -o "$out/even_filter_python.wasm.tmp" >&2
    mv "$out/even_filter_python.wasm.tmp" "$out/even_filter_python.wasm"
fi

# C: wit-bindgen's bindings + clang with wasi-libc make a preview1 core
# module (reactor: no main); `wasm-tools component new` with the adapter
# turns it into a component.
c_src="$WEFT_ROOT/examples/c/even-filter"
if stale "$out/even_filter_c.wasm" "$c_src" "$wit"; then
    say "building the C example"
    c_build="$cache/c"
    rm -rf "$c_build"
    mkdir -p "$c_build"
    "$tools/bin/wit-bindgen" c "$wit" --world filter --out-dir "$c_build" >&2
    clang --target=wasm32-wasi --sysroot=/ -isystem /usr/include/wasm32-wasi \
        -L/usr/lib/wasm32-wasi -mexec-model=reactor -Os -Wall -Wextra -Werror \
        -Wno-unused-parameter -I "$c_build" -o "$c_build/even_filter.core.wasm" \
        "$c_src/even_filter.c" "$c_build/filter.c" "$c_build/filter_component_type.o"
    "$tools/bin/wasm-tools" component new "$c_build/even_filter.core.wasm" \
        --adapt "wasi_snapshot_preview1=$adapter" -o "$out/even_filter_c.wasm.tmp"
    "$tools/bin/wasm-tools" validate "$out/even_filter_c.wasm.tmp"
    mv "$out/even_filter_c.wasm.tmp" "$out/even_filter_c.wasm"
fi

for lang in rust js python c; do
    check_component "$out/even_filter_$lang.wasm"
    echo "$out/even_filter_$lang.wasm"
done
