# Shared shell helpers for weft's scripts. Source it; don't run it.
# shellcheck shell=bash

WEFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The build cache lives outside the clone so that a second clone (or CI on a
# machine that already built weft) reuses compiled dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weft/target}"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        die "need root to run: $* (install it by hand, or run as root)"
    fi
}

apt_updated=""
# ensure_packages CMD:PACKAGE ... installs PACKAGE when CMD is missing.
ensure_packages() {
    local missing=()
    for pair in "$@"; do
        local cmd="${pair%%:*}" pkg="${pair#*:}"
        # CMD is a command name, or an absolute path to a file (a header).
        command -v "$cmd" >/dev/null 2>&1 || [ -e "$cmd" ] || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
    say "installing ${missing[*]}"
    if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
}

# pg_bindir prints the directory holding initdb and pg_ctl.
pg_bindir() {
    if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then pg_config --bindir; return; fi
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/initdb" ] && { echo "$dir"; return; }
    done
    command -v initdb >/dev/null && { dirname "$(command -v initdb)"; return; }
    return 1
}

ensure_postgres() {
    pg_bindir >/dev/null || ensure_packages "/nonexistent-initdb:postgresql"
    pg_bindir >/dev/null || die "PostgreSQL server binaries not found after installing postgresql"
    command -v psql >/dev/null || ensure_packages "psql:postgresql-client"
}

ensure_rust() {
    command -v cargo >/dev/null || die "cargo not found: install Rust with rustup (https://rustup.rs) first"
    # rust-toolchain.toml names the wasm32-wasip2 target; make sure it is there.
    (cd "$WEFT_ROOT" && rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2) ||
        (cd "$WEFT_ROOT" && rustup target add wasm32-wasip2)
}

# run_as_pg_owner CMD... runs CMD as the postgres system user when we are
# root, since Postgres refuses to run as root.
run_as_pg_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# ensure_redis makes a Redis answer on 127.0.0.1:6379, where the Redis sink
# tests keep their data (databases 11 to 14); it starts one without
# persistence when none answers.
ensure_redis() {
    ensure_packages redis-server:redis-server redis-cli:redis-tools
    if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
        say "starting redis-server on 127.0.0.1:6379"
        redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
            --dir "${TMPDIR:-/tmp}" --logfile "${TMPDIR:-/tmp}/weft-redis.log"
        for _ in $(seq 50); do redis-cli -p 6379 ping >/dev/null 2>&1 && return 0; sleep 0.1; done
        die "redis-server did not answer on 127.0.0.1:6379; see ${TMPDIR:-/tmp}/weft-redis.log"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# cargo_install_tool ARGS... runs `cargo install --locked ARGS` for a tool
# the tests or example builds use. Tools build at opt-level 1, not
# release's 3: tansu installed in 17.8 minutes instead of 22.5 on 2 cores,
# time a cold CI run (tansu, wasm-tools and wit-bindgen-cli from source)
# needs to fit in its 90 minutes; nothing they do in the tests is CPU-bound.
cargo_install_tool() {
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install --locked "$@"
}

# The tansu release the Kafka tests run against.
TANSU_VERSION=0.6.0
# ensure_tansu makes the tansu Kafka-protocol broker available to the Kafka
# tests and exports WEFT_TANSU, the binary they run: $WEFT_TANSU if set, else
# tansu on PATH or in cargo's bin dir, else it installs tansu with cargo.
ensure_tansu() {
    if [ -n "${WEFT_TANSU:-}" ]; then
        [ -x "$WEFT_TANSU" ] || die "WEFT_TANSU=$WEFT_TANSU is not an executable file; point it at a tansu binary or unset it"
        return 0
    fi
    local cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu" found
    found="$(command -v tansu 2>/dev/null || true)"
    if [ -z "$found" ] && [ -x "$cargo_bin" ]; then found="$cargo_bin"; fi
    if [ -z "$found" ]; then
        say "installing the tansu Kafka broker $TANSU_VERSION (cargo install; takes several minutes once)"
        # Its own temporary target dir, not weft's build cache.
        (unset CARGO_TARGET_DIR; cargo_install_tool tansu --version "$TANSU_VERSION" --features dynostore)
        found="$cargo_bin"
        [ -x "$found" ] || die "cargo install tansu did not produce $found"
    fi
    export WEFT_TANSU="$found"
}
