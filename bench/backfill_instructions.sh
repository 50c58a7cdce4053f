#!/usr/bin/env bash
# Instructions weft executes to backfill N rows of the e2e bench's table
# (`bench_rows`, ~200 bytes a row) into a pull sink, counted by callgrind.
#
# Rates on a shared 2-core VM move by +-10% from run to run, so a change
# that saves 5% of weft's CPU cannot be seen in them. Instruction counts
# repeat within ~0.2% whatever else the machine does: use this to compare
# two builds of weft, and the e2e bench for what the rate does.
#
#   bench/backfill_instructions.sh <weft binary> [rows] [name]
#
# Needs valgrind and PostgreSQL's server binaries (14+). Starts a throwaway
# cluster (reused across runs for the same row count, under /tmp), starts
# weft under callgrind, zeroes the counters once weft streams, backfills
# the table, dumps the counters when the backfill is `completed`, and
# prints the instructions per row. The profile is left in
# ${OUT:-/tmp/weft-callgrind}/<name>.out.1 for callgrind_annotate.
# The count covers all of weft's threads, not Postgres.
set -euo pipefail
weft=$(realpath "${1:?usage: $0 <weft binary> [rows] [name]}")
rows=${2:-100000}
name=${3:-$(basename "$weft")}
out=${OUT:-/tmp/weft-callgrind}
port=${PGPORT_BENCH:-55433}
api=${API_PORT_BENCH:-55480}
root=/tmp/weft-callgrind-pg
mkdir -p "$out"

command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bindir/initdb" ] || { echo "PostgreSQL's server binaries are not installed" >&2; exit 1; }
# initdb and postgres refuse to run as root.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
psql_q() { psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

if [ ! -f "$root/ready.$rows" ]; then
    as_pg "$bindir/pg_ctl" -D "$root/data" stop -m immediate >/dev/null 2>&1 || true
    rm -rf "$root" && mkdir -p "$root"
    [ "$(id -u)" = 0 ] && chown postgres "$root"
    as_pg "$bindir/initdb" -D "$root/data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >/dev/null
    cat >>"$root/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$root'
wal_level = logical
fsync = off
full_page_writes = off
shared_buffers = 128MB
max_wal_size = 8GB
CONF
    as_pg "$bindir/pg_ctl" -D "$root/data" -l "$root/log" -w start >/dev/null
    # The table and rows of host/benches/e2e/workload.rs.
    psql_q -c "CREATE TABLE bench_rows (id bigint PRIMARY KEY, customer text NOT NULL,
        item text NOT NULL, qty int NOT NULL, price numeric(10,2) NOT NULL,
        status text NOT NULL, created_at timestamptz NOT NULL, note text NOT NULL)"
    psql_q -c "CREATE PUBLICATION bench_pub FOR TABLE public.bench_rows"
    psql_q -c "INSERT INTO bench_rows SELECT g, 'customer-' || g, 'item number ' || (g % 997),
        (g % 17) + 1, ((g % 100000) / 100.0)::numeric(10,2), 'new', now(),
        repeat('n', 60) || g FROM generate_series(1, $rows) g"
    psql_q -c "VACUUM ANALYZE bench_rows"
    touch "$root/ready.$rows"
fi
as_pg "$bindir/pg_ctl" -D "$root/data" -l "$root/log" -w start >/dev/null 2>&1 || true

work=$(mktemp -d /tmp/weft-callgrind-run.XXXX)
slot="callgrind_$$"
cat >"$work/weft.yml" <<YML
databases:
  - name: db
    hostname: 127.0.0.1
    port: $port
    database: postgres
    username: postgres
    slot: { name: $slot, create_if_not_exists: true }
    publication: { name: bench_pub }
sinks:
  - name: bench
    database: db
    source: { include_tables: [public.bench_rows] }
    destination: { type: sequin_stream }
YML
valgrind --tool=callgrind --callgrind-out-file="$out/$name.out" \
    "$weft" run --config "$work/weft.yml" --data-dir "$work/data" \
    --listen "127.0.0.1:$api" --metrics-listen "127.0.0.1:$((api + 1))" >"$work/log" 2>&1 &
vg=$!
cleanup() {
    kill -TERM "$vg" 2>/dev/null && wait "$vg" 2>/dev/null
    psql_q -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
until curl -sf "http://127.0.0.1:$api/health" >/dev/null; do
    kill -0 "$vg" 2>/dev/null || { cat "$work/log" >&2; exit 1; }
    sleep 1
done
until psql_q -At -c "SELECT active FROM pg_replication_slots WHERE slot_name = '$slot'" | grep -q t; do
    sleep 1
done
sleep 2
callgrind_control -z "$vg" >/dev/null 2>&1
id=$(curl -sf -X POST -H 'content-type: application/json' -d '{"table": "public.bench_rows"}' \
    "http://127.0.0.1:$api/api/sinks/bench/backfills" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
until curl -sf "http://127.0.0.1:$api/api/sinks/bench/backfills/$id" | grep -q '"state":"completed"'; do
    sleep 1
done
callgrind_control -d "$vg" >/dev/null 2>&1
total=$(callgrind_annotate "$out/$name.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
echo "$name: $total instructions for $rows rows, $((total / rows)) per row ($out/$name.out.1)"
