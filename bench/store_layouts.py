#!/usr/bin/env python3
"""What one store transaction of a backfill chunk costs in SQLite, per layout.

The backfill's stored rate is bound by the pull store's transaction (see
BENCHMARKS.md, issue 8). This replays the same work in four layouts, in
one run, so their ratio says what a redesign of the pull store could gain
before anyone builds it:

  rows      weft's layout today: one `pull_messages` row per message, its
            indexes, and weft's insert statement (the group-head probe
            included), read from host/src/store/schema.rs and mod.rs.
  segments  one row per `--segment` messages holding their payloads as one
            blob, plus one small row per message in a `(sink, group_id,
            commit_lsn, commit_idx)` table without rowid, which per-group
            ordering needs to find a group's earlier messages.
  blobs     the segment rows alone (groups kept elsewhere, e.g. memory):
            the floor for any layout that writes every payload durably.
  zblobs    the same, each segment compressed (zlib level 1) inside the
            timed transaction: what fewer bytes on disk buy, paid in CPU.

Each layout gets a fresh file in WAL mode with `synchronous = FULL` and
`temp_store = MEMORY`, as weft opens its store; `--chunk` messages per
transaction, each the message of a row of the e2e bench's table (~600
bytes), one group per message (as a backfill's rows are). Prints the
median transaction time of each layout and the messages per second it
allows: the store's time alone, the messages being rendered beforehand.

    python3 bench/store_layouts.py --messages 300000
"""

import argparse
import os
import re
import sqlite3
import statistics
import tempfile
import time
import zlib

STORE = os.path.join(os.path.dirname(__file__), "..", "host", "src", "store")


SEGMENT_SCHEMA = """
CREATE TABLE pull_segments (
    id          INTEGER PRIMARY KEY,
    sink        TEXT NOT NULL,
    commit_lsn  INTEGER NOT NULL,
    first_idx   INTEGER NOT NULL,
    count       INTEGER NOT NULL,
    payloads    BLOB NOT NULL,
    UNIQUE (sink, commit_lsn, first_idx)
) STRICT;
CREATE TABLE segment_groups (
    sink        TEXT NOT NULL,
    group_id    TEXT NOT NULL,
    commit_lsn  INTEGER NOT NULL,
    commit_idx  INTEGER NOT NULL,
    PRIMARY KEY (sink, group_id, commit_lsn, commit_idx)
) STRICT, WITHOUT ROWID;
"""


def weft_schema():
    """weft's migrations, in order, as SQL text."""
    text = open(os.path.join(STORE, "schema.rs")).read()
    body = text.split("MIGRATIONS: &[&str] = &[", 1)[1].split("\n];", 1)[0]
    return re.findall(r'r#"(.*?)"#', body, re.S)


def weft_insert():
    """weft's message insert statement, as `insert_messages` prepares it."""
    text = open(os.path.join(STORE, "mod.rs")).read()
    return re.search(r'"(INSERT INTO pull_messages.*?)"', text, re.S).group(1)


def connect(path, synchronous):
    conn = sqlite3.connect(path, isolation_level=None)
    assert conn.execute("PRAGMA journal_mode = wal").fetchone()[0] == "wal"
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn


def payload(n):
    """The message of row `n` of the e2e bench's `bench_rows` table
    (host/benches/e2e/workload.rs), as a backfill renders it."""
    record = (
        f'{{"id":{n},"customer":"customer-{n}","item":"item number {n % 997}",'
        f'"qty":{n % 17 + 1},"price":"{(n % 100000) / 100:.2f}","status":"new",'
        f'"created_at":"2026-12-03T12:00:00.{n % 1000000:06d}+00:00","note":"{"n" * 60}{n}"}}'
    )
    return (
        f'{{"record":{record},"changes":null,"action":"read","metadata":'
        f'{{"table_schema":"public","table_name":"bench_rows",'
        f'"commit_timestamp":"2026-12-03T12:00:00.000000Z","commit_lsn":123456789,'
        f'"commit_idx":{n % 10000},"idempotency_key":"YmYtMDEyMzQ1Njc4OWFiY2RlZjp7{n:08d}",'
        f'"database_name":"bench","consumer":{{"id":"bench","name":"bench","annotations":{{}}}},'
        f'"transaction_annotations":null}}}}'
    )


def run(layout, args):
    fd, path = tempfile.mkstemp(suffix=".db", dir=args.dir)
    os.close(fd)
    conn = connect(path, args.synchronous)
    insert = weft_insert()
    if layout == "rows":
        for sql in weft_schema():
            conn.executescript(sql)
    else:
        conn.executescript(SEGMENT_SCHEMA)
    times = []
    lsn = 1000
    for start in range(0, args.messages, args.chunk):
        ids = range(start, min(start + args.chunk, args.messages))
        lsn += 1
        now = int(time.time() * 1000)
        # Messages are rendered before the transaction, as weft does.
        rendered = [(i, payload(i)) for i in ids]
        segments = [rendered[k : k + args.segment] for k in range(0, len(rendered), args.segment)]
        blobs = [
            b"".join(len(p.encode()).to_bytes(4, "little") + p.encode() for _, p in members)
            for members in segments
        ]
        began = time.perf_counter()
        conn.execute("BEGIN")
        if layout == "rows":
            conn.executemany(
                insert,
                (
                    ("bench", lsn, i - start, str(i), f"bf-{i}", p, now, None, None, None)
                    for i, p in rendered
                ),
            )
        else:
            for members, blob in zip(segments, blobs):
                if layout == "zblobs":
                    blob = zlib.compress(blob, 1)
                conn.execute(
                    "INSERT INTO pull_segments (sink, commit_lsn, first_idx, count, payloads) VALUES (?, ?, ?, ?, ?)",
                    ("bench", lsn, members[0][0] - start, len(members), blob),
                )
                if layout == "segments":
                    conn.executemany(
                        "INSERT INTO segment_groups VALUES (?, ?, ?, ?)",
                        (("bench", str(i), lsn, i - start) for i, _ in members),
                    )
        conn.execute("COMMIT")
        times.append(time.perf_counter() - began)
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    median = statistics.median(times)
    return median, args.chunk / median


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--segment", type=int, default=1_000)
    parser.add_argument("--dir", default=None, help="where the store files go (default: TMPDIR)")
    parser.add_argument("--synchronous", default="FULL", help="weft's store uses FULL")
    parser.add_argument("--layouts", default="rows,segments,blobs,zblobs")
    args = parser.parse_args()
    print(
        f"sqlite {sqlite3.sqlite_version}, {args.messages} messages, {args.chunk} per transaction,"
        f" synchronous = {args.synchronous}"
    )
    print(f"{'layout':<10} {'median txn (ms)':>16} {'messages/s':>12}")
    for layout in args.layouts.split(","):
        median, rate = run(layout, args)
        print(f"{layout:<10} {median * 1000:>16.1f} {rate:>12,.0f}")


if __name__ == "__main__":
    main()
