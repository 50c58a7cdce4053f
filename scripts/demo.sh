#!/usr/bin/env bash
# The local demo: a throwaway Postgres with an `orders` table, weft running
# the example WASM transform (it upper-cases `customer`), and changes flowing
# to a Sequin Stream sink that this script pulls from and acks.
#
#   scripts/demo.sh            # 10 rounds of changes, then clean up
#   DEMO_ROUNDS=0 scripts/demo.sh   # keep going until Ctrl-C
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$WEFT_ROOT"

ROUNDS="${DEMO_ROUNDS:-10}"
ensure_packages gcc:build-essential python3:python3 curl:curl
ensure_postgres
ensure_rust

say "building weft and the example transform (the first build takes a few minutes)"
scripts/build-guests.sh >/dev/null
cargo build --quiet --bin weft
WEFT="$CARGO_TARGET_DIR/debug/weft"
TRANSFORM="$CARGO_TARGET_DIR/guests/wasm32-wasip2/guest/weft_upcase_transform.wasm"
[ -f "$TRANSFORM" ] || die "the example transform was not built at $TRANSFORM"

WORK="$(mktemp -d -t weft-demo.XXXXXX)"
chmod 755 "$WORK"
PGDATA="$WORK/pgdata"; PGPORT="$(free_port)"; API_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
BIN="$(pg_bindir)"
WEFT_PID=""
cleanup() {
    [ -n "$WEFT_PID" ] && kill "$WEFT_PID" 2>/dev/null && wait "$WEFT_PID" 2>/dev/null || true
    run_as_pg_owner "$BIN/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

say "starting a throwaway Postgres on 127.0.0.1:$PGPORT"
mkdir -p "$PGDATA"
if [ "$(id -u)" -eq 0 ]; then chown postgres "$PGDATA" "$WORK"; fi
run_as_pg_owner "$BIN/initdb" -D "$PGDATA" -U postgres -A trust >/dev/null
run_as_pg_owner "$BIN/pg_ctl" -D "$PGDATA" -l "$WORK/postgres.log" -w start \
    -o "-p $PGPORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$WORK -c wal_level=logical" >/dev/null
psql_demo() { psql -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
psql_demo -c "CREATE TABLE orders (id serial PRIMARY KEY, customer text NOT NULL, total numeric(10,2) NOT NULL, status text NOT NULL DEFAULT 'new')"

cat > "$WORK/weft.yml" <<YAML
databases:
  - name: shop
    url: postgres://postgres@127.0.0.1:$PGPORT/postgres
    slot: { name: weft_demo, create_if_not_exists: true }
    publication: { name: weft_demo, create_if_not_exists: true }
functions:
  - name: upcase
    type: transform
    file: $TRANSFORM
    config: { column: customer }
sinks:
  - name: orders
    database: shop
    source: { include_tables: [public.orders] }
    transform: upcase
    destination: { type: sequin_stream }
YAML

say "starting weft (API on 127.0.0.1:$API_PORT, metrics on 127.0.0.1:$METRICS_PORT)"
"$WEFT" run --config "$WORK/weft.yml" --data-dir "$WORK/weft-data" --listen "127.0.0.1:$API_PORT" \
    --metrics-listen "127.0.0.1:$METRICS_PORT" 2>"$WORK/weft.log" &
WEFT_PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$API_PORT/health" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$API_PORT/health" >/dev/null || { cat "$WORK/weft.log"; die "weft did not start"; }
# Changes are captured from the moment the replication slot streams.
for _ in $(seq 300); do
    [ "$(psql_demo -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'weft_demo'")" = t ] && break
    sleep 0.2
done
[ "$(psql_demo -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'weft_demo'")" = t ] ||
    { cat "$WORK/weft.log"; die "weft did not start streaming from its replication slot"; }

API="http://127.0.0.1:$API_PORT/api/http_pull_consumers/orders"
pull_and_ack() {
    local body ids
    body="$(curl -sf "$API/receive?batch_size=100&wait_for=2000")"
    python3 -c 'import json,sys; [print(json.dumps(m["data"], indent=2)) for m in json.load(sys.stdin)["data"]]' <<<"$body"
    ids="$(python3 -c 'import json,sys; print(json.dumps({"ack_ids":[m["ack_id"] for m in json.load(sys.stdin)["data"]]}))' <<<"$body")"
    if [ "$ids" = '{"ack_ids": []}' ]; then echo "(no messages yet)"; return; fi
    curl -sf -X POST -H 'content-type: application/json' -d "$ids" "$API/ack" >/dev/null
}

customers=(ada grace linus barbara ken margaret dennis frances)
round=0
while [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ]; do
    round=$((round + 1))
    c="${customers[$((RANDOM % ${#customers[@]}))]}"
    say "round $round: insert an order for $c, pay an older one, delete another"
    psql_demo -c "INSERT INTO orders (customer, total) VALUES ('$c', $((RANDOM % 500)).99)"
    psql_demo -c "UPDATE orders SET status = 'paid' WHERE id = (SELECT min(id) FROM orders WHERE status = 'new')"
    if [ $((round % 3)) -eq 0 ]; then psql_demo -c "DELETE FROM orders WHERE id = (SELECT min(id) FROM orders)"; fi
    pull_and_ack
    sleep 1
done
say "done: weft's log is below; run with DEMO_ROUNDS=0 to keep going"
tail -n 5 "$WORK/weft.log"
