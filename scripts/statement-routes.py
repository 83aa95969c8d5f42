#!/usr/bin/env python3
"""Which of Nimbus's statements a Citus coordinator could not route to one shard (issue 40).

Reads a PostgreSQL server log written with `log_statement = 'all'` and
`log_line_prefix = '%m [%p] app=%a '` while the suite ran, keeps the statements of sessions
named `nimbus` (every connection a node opens: PostgresLocation.applicationName; a test's own
statements are not the server's), folds literals and parameters to N, and splits each statement
into the branches of its top-level UNION ALL (a unit of work's load is one statement of many
branches, each of which has to route on its own).

A branch that reads or writes a table Citus would distribute by database (docs/scale-out.md,
"Distribution (Citus)") routes when it names the database: `database_id = <constant or
parameter>` (or `= ANY(...)`, which prunes to the named shards), or for `databases` itself its
distribution column `id`. A branch distributed by user (badges) routes on `user_id`. A call of
the apply function routes when its first argument is the one database its writes touch (or NULL
when they touch only the coordinator's tables). Coordinator-local and reference tables route
anywhere.

What may not route is listed in scripts/statement-routes.allowed, each with why: a background
sweep over every database (Citus runs it on every shard at once, which is what it is for).
Anything else that does not route fails the check (exit 1); so does a listed pattern that no
statement matched, when asked (`--strict`): a list entry outliving its statement.

    scripts/statement-routes.py LOG [--from LINE] [--strict]
"""
import argparse
import collections
import os
import re
import sys

BY_DATABASE = ["databases", "zones", "records", "field_index", "record_tokens", "pair_index", "record_references",
               "asset_references", "subscriptions", "record_history"]
# Badges are read and written per user. The notification collection and push tokens stay on the
# coordinator: live delivery reads notifications in one global order, and a push token is found
# by the token a device sends.
BY_USER = ["badges"]
SKIPPED = ("begin", "commit", "rollback", "set ", "show", "listen", "unlisten", "select pg_", "create ", "drop ", "alter ",
           "analyze", "vacuum", "deallocate", "discard", "prepare transaction", "savepoint", "release")


def statements(path, first):
    current = None
    for number, line in enumerate(open(path, errors="replace").read().split("\n"), 1):
        if number < first:
            continue
        found = re.search(r"app=(\S*) LOG:  (?:statement|execute [^:]*): (.*)$", line)
        if found:
            if current:
                yield current
            current = found.group(2) if found.group(1) == "nimbus" else None
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


def branches(text):
    """The branches of the statement's top-level UNION ALL (depth 0 of parentheses)."""
    parts, depth, start, lower = [], 0, 0, text.lower()
    index = 0
    while index < len(text):
        char = text[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and lower.startswith(" union all ", index):
            parts.append(text[start:index].strip())
            index += len(" union all ")
            start = index
            continue
        index += 1
    parts.append(text[start:].strip())
    return parts


def touched(lower, tables):
    return [t for t in tables if re.search(r"\b(from|join|into|update)\s+" + t + r"\b", lower)]


def routes(branch):
    """None when the branch routes (or touches nothing distributed), else the tables it names."""
    lower = branch.lower()
    if lower.startswith(SKIPPED):
        return None
    if "nimbus_apply_" in lower:
        # The unit's one database as the first argument (its JSON and the typed arrays of its
        # record saves after it); NULL for a unit that writes no database's tables (only the
        # coordinator's). A group commit whose units wrote several
        # databases says so: a transaction over several shards, which Citus runs correctly;
        # counted and shown (main), not failed, since whether a run groups two users' first
        # writes is the scheduler's to say.
        if not re.search(r"nimbus_apply_\w+\(n::bigint, n::jsonb(, n)*\)( as several_databases)?$", lower):
            return ["nimbus_apply"]
        return None
    by_database = touched(lower, BY_DATABASE)
    by_user = touched(lower, BY_USER)
    missing = []
    if by_database:
        named = re.search(r"database_id\s*=\s*(n\b|any)", lower)
        if not named and set(by_database) == {"databases"}:
            named = re.search(r"(?<![\w.])(\w+\.)?id\s*=\s*(n\b|any)", lower)
        # A database's own row by its id, with its zones' rows in a subquery joined on the
        # distribution column (a database's usage, PostgresDatabaseFeed.usedBytes): one
        # shard's rows, which a coordinator infers from the join.
        if not named and "databases" in by_database and re.search(r"\bdatabase_id\s*=\s*databases\.id\b", lower):
            named = re.search(r"(?<![\w.])(\w+\.)?id\s*=\s*(n\b|any)", lower)
        if not named:
            missing += by_database
    if by_user and not re.search(r"user_id\s*=\s*(n\b|any)", lower):
        missing += by_user
    return missing or None


def apply_body_statements(path):
    """The statements of the apply function's body (PostgresApply.body), folded: a unit's writes
    run inside one call, so the call routing is not enough; each statement in it must name its
    database too. Read from the source, as every node installs it."""
    text = open(path).read()
    start = text.index('static let body = #"""') + len('static let body = #"""')
    body = text[start:text.index('"""#', start)]
    body = re.sub(r"--[^\n]*", "", body)
    return [folded(part) for part in body.split(";") if part.strip()]


def body_routes(statement):
    """None when a statement of the body routes: an INSERT routes each row by the database it
    inserts; any other statement on a table of a logical database names the database, as the
    function's variable `db` or a value of the write (`w->>...`)."""
    lower = statement.lower()
    tables = touched(lower, BY_DATABASE)
    if not tables or re.search(r"\binsert into (" + "|".join(BY_DATABASE) + r")\b", lower):
        return None
    named = r"\s*=\s*(db\b|\(w->>\?\)::bigint)"
    if re.search(r"database_id" + named, lower):
        return None
    if set(tables) == {"databases"} and re.search(r"(?<![\w.])id" + named, lower):
        return None
    return tables


def allowed(path):
    entries = []
    for line in open(path):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        pattern, _, why = line.partition("\t")
        entries.append((re.compile(pattern), why.strip()))
    return entries


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--from", dest="first", type=int, default=1)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--allowed", default=os.path.join(os.path.dirname(__file__), "statement-routes.allowed"))
    parser.add_argument("--apply-body", default=os.path.join(os.path.dirname(__file__), "..", "Sources", "NimbusPostgres", "PostgresApply.swift"))
    arguments = parser.parse_args()
    entries = allowed(arguments.allowed)
    used = collections.Counter()
    seen = collections.Counter(folded(text) for text in statements(arguments.log, arguments.first))
    several = sum(count for text, count in seen.items() if "several_databases" in text.lower())
    branchCount, failing, excused = 0, collections.Counter(), 0
    for text, count in seen.items():
        for branch in branches(text):
            branchCount += 1
            missing = routes(branch)
            if missing is None:
                continue
            listed = [pattern for pattern, _ in entries if pattern.search(branch)]
            if listed:
                used[listed[0].pattern] += count
                excused += 1
                continue
            failing[(",".join(missing), branch)] += count
    for statement in apply_body_statements(arguments.apply_body):
        missing = body_routes(statement)
        if missing is not None:
            failing[(",".join(missing) + " (in the apply function)", statement)] += 1
    print(f"{len(seen)} distinct statements of the server ({branchCount} branches); "
          f"{excused} listed as sweeps over every database; {len(failing)} would not route")
    for (tables, branch), count in sorted(failing.items(), key=lambda row: -row[1]):
        print(f"{count:6d}  {tables}  {branch[:400]}")
    if several:
        print(f"{several} group commits wrote several databases in one call (one transaction over several shards on Citus)")
    stale = [pattern.pattern for pattern, _ in entries if not used[pattern.pattern]]
    for pattern in stale:
        print(f"listed but not seen: {pattern}")
    if failing or (arguments.strict and stale):
        return 1
    if not seen:
        print("no statement of the server in the log: was log_line_prefix set?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
