#!/usr/bin/env python3
"""Which statements a Citus coordinator could route to one shard (issue 40, "Citus, routable").

Reads a PostgreSQL server log written with log_statement = 'all' while the suite ran, gathers
the distinct statements (literals and numbers folded), and lists those that touch a table a
Citus layout would distribute by database (docs/scale-out.md, "PostgreSQL layout") without
naming the database: a `database_id = <constant or parameter>` the coordinator can route by.
The apply function is listed too: a call carrying many databases' writes in one JSON argument
routes nowhere. A heuristic over the text, not a parser: it errs towards listing.

    psql "$URL" -c "ALTER SYSTEM SET log_statement = 'all'" -c "SELECT pg_reload_conf()"
    NIMBUS_TEST_POSTGRES=$URL NIMBUS_TEST_STORAGE=postgres swift test --skip-build --filter …
    psql "$URL" -c "ALTER SYSTEM RESET log_statement" -c "SELECT pg_reload_conf()"
    scripts/statement-routes.py /tmp/nimbus-pg-54329/server.log [first-line]
"""
import collections
import re
import sys

DISTRIBUTED = ["databases", "zones", "records", "field_index", "record_tokens", "pair_index", "record_references",
               "asset_references", "subscriptions", "record_history", "change_outbox", "subscription_changes"]
SKIPPED = ("begin", "commit", "rollback", "set ", "show", "listen", "select pg_", "create ", "drop ", "alter ")


def statements(path, first):
    current = None
    for number, line in enumerate(open(path, errors="replace").read().split("\n"), 1):
        if number < first:
            continue
        found = re.search(r"LOG:  (?:statement|execute [^:]*): (.*)$", line)
        if found:
            if current:
                yield current
            current = found.group(1)
        elif current is not None and line[:1] in ("\t", " "):
            current += "\n" + line
        elif current is not None:
            yield current
            current = None
    if current:
        yield current


def folded(text):
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"'[^']*'", "?", text)
    return re.sub(r"\$\d+|\b\d+\b", "N", text)


def main():
    path = sys.argv[1]
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    seen = collections.Counter(folded(text) for text in statements(path, first))
    touching, unroutable = 0, []
    for text, count in seen.items():
        lower = text.lower()
        if lower.startswith(SKIPPED):
            continue
        tables = [t for t in DISTRIBUTED if re.search(r"\b(from|join|into|update)\s+" + t + r"\b", lower)]
        applies = "nimbus_apply_" in lower
        if not tables and not applies:
            continue
        touching += 1
        if applies or not re.search(r"database_id\s*=\s*(n\b|any)", lower):
            unroutable.append((count, tables or ["nimbus_apply"], text))
    print(f"{len(seen)} distinct statements, {touching} touch distributed tables, {len(unroutable)} of those would not route")
    for count, tables, text in sorted(unroutable, key=lambda row: -row[0]):
        print(f"{count:6d}  {','.join(tables)}  {text[:200]}")
    return 1 if unroutable else 0


if __name__ == "__main__":
    sys.exit(main())
