#!/usr/bin/env python3
# What the index-entry layout costs a batch, in SQLite alone (issue 35/36, fifty-fifth session):
# 200-record transactions of the wrk batch scenario's records (production grants: category
# QUERYABLE, count SORTABLE, their pair) into three layouts, after 20,000 preloaded, through
# Python's sqlite3 (the system library, as Nimbus uses). A: today's tables (entries keyed by
# record, each with a second index in query order). B: entries kept only in query order (one
# b-tree each, no key by record). C: B without records_by_type.
#
#   python3 Benchmarks/layout/entry-layouts.py A B C
import sqlite3, time, os, sys, random
def setup(path, layout):
    if os.path.exists(path): os.remove(path)
    for s in ("-wal", "-shm"):
        if os.path.exists(path + s): os.remove(path + s)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL"); db.execute("PRAGMA synchronous=NORMAL"); db.execute("PRAGMA cache_size=-65536")
    db.executescript("""
    CREATE TABLE records (zone_id INTEGER NOT NULL, record_name TEXT NOT NULL, record_type TEXT NOT NULL, fields BLOB NOT NULL,
      parent TEXT, change_sequence INTEGER NOT NULL, created_at INTEGER NOT NULL, created_by TEXT NOT NULL, created_device TEXT NOT NULL,
      modified_at INTEGER NOT NULL, modified_by TEXT NOT NULL, modified_device TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,
      UNIQUE (zone_id, record_name));
    CREATE INDEX records_by_change ON records(zone_id, change_sequence);
    """)
    if layout != "C":
        db.execute("CREATE INDEX records_by_type ON records(zone_id, record_type) WHERE deleted = 0")
    if layout == "A":
        db.executescript("""
        CREATE TABLE field_index (record_id INTEGER NOT NULL, field TEXT NOT NULL, position INTEGER NOT NULL, zone_id INTEGER NOT NULL,
          record_type TEXT NOT NULL, num, text TEXT, lon REAL, PRIMARY KEY (record_id, field, position)) WITHOUT ROWID;
        CREATE INDEX field_index_by_number ON field_index(zone_id, record_type, field, num, record_id) WHERE num IS NOT NULL AND lon IS NULL;
        CREATE INDEX field_index_by_text ON field_index(zone_id, record_type, field, text, record_id) WHERE text IS NOT NULL;
        CREATE TABLE pair_index (record_id INTEGER NOT NULL, field TEXT NOT NULL, sort_field TEXT NOT NULL, zone_id INTEGER NOT NULL,
          record_type TEXT NOT NULL, value NOT NULL, sort_value NOT NULL, PRIMARY KEY (record_id, field, sort_field)) WITHOUT ROWID;
        CREATE INDEX pair_index_by_value ON pair_index(zone_id, record_type, field, sort_field, value, sort_value, record_id);
        """)
    else:
        db.executescript("""
        CREATE TABLE field_num (zone_id INTEGER NOT NULL, record_type TEXT NOT NULL, field TEXT NOT NULL, num NOT NULL, record_id INTEGER NOT NULL,
          position INTEGER NOT NULL, PRIMARY KEY (zone_id, record_type, field, num, record_id, position)) WITHOUT ROWID;
        CREATE TABLE field_text (zone_id INTEGER NOT NULL, record_type TEXT NOT NULL, field TEXT NOT NULL, text TEXT NOT NULL, record_id INTEGER NOT NULL,
          position INTEGER NOT NULL, PRIMARY KEY (zone_id, record_type, field, text, record_id, position)) WITHOUT ROWID;
        CREATE TABLE pair_index (zone_id INTEGER NOT NULL, record_type TEXT NOT NULL, field TEXT NOT NULL, sort_field TEXT NOT NULL, value NOT NULL,
          sort_value NOT NULL, record_id INTEGER NOT NULL, PRIMARY KEY (zone_id, record_type, field, sort_field, value, sort_value, record_id)) WITHOUT ROWID;
        """)
    return db

def batch(db, layout, start, n, rid):
    db.execute("BEGIN IMMEDIATE")
    rows = []
    for i in range(start, start + n):
        cat = "c%d" % (i % 50)
        fields = ('{"title":{"value":"item %d","type":"STRING"},"category":{"value":"%s","type":"STRING"},"count":{"value":%d,"type":"INT64"},"score":{"value":0.5,"type":"DOUBLE"}}' % (i, cat, i)).encode()
        db.execute("INSERT INTO records (zone_id, record_name, record_type, fields, parent, change_sequence, created_at, created_by, created_device, modified_at, modified_by, modified_device, deleted, rowid) VALUES (2, ?, 'Item', ?, NULL, ?, 1, '_0123456789abcdef0123456789abcdef', 'device', 1, '_0123456789abcdef0123456789abcdef', 'device', 0, ?)",
                   ("b-%d" % i, fields, i, rid + i))
        rows.append((rid + i, cat, i))
    if layout == "A":
        db.executemany("INSERT INTO field_index (record_id, field, position, zone_id, record_type, num, text, lon) VALUES (?, 'category', 0, 2, 'Item', NULL, ?, NULL)", [(r, c) for r, c, _ in rows])
        db.executemany("INSERT INTO field_index (record_id, field, position, zone_id, record_type, num, text, lon) VALUES (?, 'count', 0, 2, 'Item', ?, NULL, NULL)", [(r, k) for r, _, k in rows])
        db.executemany("INSERT INTO pair_index (record_id, field, sort_field, zone_id, record_type, value, sort_value) VALUES (?, 'category', 'count', 2, 'Item', ?, ?)", rows)
    else:
        db.executemany("INSERT INTO field_text VALUES (2, 'Item', 'category', ?, ?, 0)", [(c, r) for r, c, _ in rows])
        db.executemany("INSERT INTO field_num VALUES (2, 'Item', 'count', ?, ?, 0)", [(k, r) for r, _, k in rows])
        db.executemany("INSERT INTO pair_index VALUES (2, 'Item', 'category', 'count', ?, ?, ?)", [(c, k, r) for r, c, k in rows])
    db.execute("COMMIT")

for layout in sys.argv[1:]:
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "nimbus-layout-%s.db" % layout)
    db = setup(path, layout)
    for b in range(100): batch(db, layout, b * 200, 200, 0)  # 20,000 preloaded
    t = time.perf_counter(); n = 0
    for b in range(100, 350): batch(db, layout, b * 200, 200, 0); n += 200
    dt = time.perf_counter() - t
    print("%s: %.0f records/s (%d records in %.2f s), file %d KB" % (layout, n / dt, n, dt, (os.path.getsize(path) + os.path.getsize(path + "-wal")) // 1024))
    db.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix): os.remove(path + suffix)
