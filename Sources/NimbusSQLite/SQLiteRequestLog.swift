import Foundation
import GRDB
import NimbusStorage

/// The lasting request log on SQLite (`RequestLogStore`): a file of its own beside the store
/// (`nimbus-requests.sqlite` beside `nimbus.sqlite`), so a batch of log lines never waits for,
/// nor holds up, the data's one writer. synchronous=NORMAL: a crash loses no line, a power cut
/// may lose the last second's.
public final class SQLiteRequestLog: RequestLogStore {
    private let pool: DatabasePool
    public let path: String

    /// The log file that goes with the store at `storePath`.
    public static func path(besideStore storePath: String) -> String {
        storePath.hasSuffix(".sqlite") ? String(storePath.dropLast(".sqlite".count)) + "-requests.sqlite" : storePath + "-requests"
    }

    public init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        SQLiteProcessSettings.apply()
        pool = try DatabasePool(path: path, configuration: configuration)
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // A second's lines go in as many statements of one transaction, and each statement
            // after the first rewrites pages an earlier one wrote, which SQLite copies to a
            // statement journal first. In a temporary file (the default) that was a 4 KB
            // `pwrite` a page once past 64 KB, about one a request under load: 5,000 a second
            // under wrk's fetches (docs/benchmarks.md, "The request log's statement journal").
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
        }
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-requests") { db in
            try db.execute(
                sql: """
                    CREATE TABLE requests (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at INTEGER NOT NULL,
                        node TEXT NOT NULL,
                        uuid TEXT NOT NULL,
                        method TEXT NOT NULL,
                        route TEXT NOT NULL,
                        container TEXT,
                        environment TEXT,
                        database TEXT,
                        user_record_name TEXT,
                        user_name TEXT,
                        status INTEGER NOT NULL,
                        error TEXT,
                        -- Comma-separated, with a comma at each end, so one code is found whole.
                        item_errors TEXT,
                        ms REAL NOT NULL
                    );
                    CREATE INDEX requests_by_time ON requests(at);
                    CREATE INDEX requests_by_user_name ON requests(user_name, id);
                    CREATE INDEX requests_by_user_record ON requests(user_record_name, id);
                    """)
        }
        migrator.registerMigration("v2-request-minutes") { db in
            try db.execute(
                sql: """
                    CREATE TABLE request_minutes (
                        minute INTEGER NOT NULL,
                        node TEXT NOT NULL,
                        container TEXT NOT NULL,
                        requests INTEGER NOT NULL,
                        server_errors INTEGER NOT NULL,
                        errors TEXT NOT NULL,
                        latency TEXT NOT NULL
                    );
                    CREATE INDEX request_minutes_by_minute ON request_minutes(minute);
                    """)
        }
        try migrator.migrate(pool)
        self.path = path
    }

    public func appendRequests(_ rows: [StoredRequest], minuteFigures: [StoredMinuteFigures]) async throws {
        guard !rows.isEmpty || !minuteFigures.isEmpty else { return }
        try await pool.write { db in
            // Bound directly (`BoundArguments`: GRDB's arguments were most of this insert's cost
            // under load), and many lines to a statement: with a statement a line, the
            // statement's own steps and the table's AUTOINCREMENT counter (written at each
            // statement's end) were three tenths of the log's cost (docs/benchmarks.md).
            for lines in rows.chunked(Self.linesPerInsert) {
                try db.executeBound(Self.insertLines[lines.count]) { arguments in
                    for row in lines {
                        let items: String? = row.itemErrorCodes.isEmpty ? nil : "," + row.itemErrorCodes.joined(separator: ",") + ","
                        arguments.add(row.at)
                        arguments.add(row.node)
                        arguments.add(row.requestUUID)
                        arguments.add(row.method)
                        arguments.add(row.route)
                        arguments.add(row.container)
                        arguments.add(row.environment)
                        arguments.add(row.database)
                        arguments.add(row.userRecordName)
                        arguments.add(row.userName)
                        arguments.add(row.status)
                        arguments.add(row.serverErrorCode)
                        arguments.add(items)
                        arguments.add(row.milliseconds)
                    }
                }
            }
            let figures = try db.cachedStatement(
                sql: """
                    INSERT INTO request_minutes (minute, node, container, requests, server_errors, errors, latency)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """)
            for row in minuteFigures {
                try figures.execute(arguments: [
                    row.minute, row.node, row.container, row.requests, row.serverErrors, row.errorsText, row.latencyText,
                ])
            }
        }
    }

    /// Lines a statement inserts at most: 14 values each, well under SQLite's bound on a
    /// statement's parameters.
    static let linesPerInsert = 32

    /// The insert of `n` lines, at index `n` (made once; the connection caches each prepared).
    private static let insertLines: [String] = (0...linesPerInsert).map { count in
        let line = "(" + QuerySQL.marks(14) + ")"
        return """
            INSERT INTO requests (at, node, uuid, method, route, container, environment, database, user_record_name,
                user_name, status, error, item_errors, ms) VALUES \(Array(repeating: line, count: max(count, 1)).joined(separator: ", "))
            """
    }

    public func requests(_ search: RequestSearch) async throws -> [StoredRequest] {
        var conditions: [String] = []
        var arguments: [any DatabaseValueConvertible] = []
        if let visible = search.visibleContainers {
            guard !visible.isEmpty else { return [] }
            conditions.append("container IN (\(Array(repeating: "?", count: visible.count).joined(separator: ", ")))")
            arguments += visible.sorted()
        }
        for (column, value) in [("container", search.container), ("environment", search.environment), ("database", search.database)] {
            if let value {
                conditions.append("\(column) = ?")
                arguments.append(value)
            }
        }
        if let user = search.user {
            conditions.append("(user_name = ? OR user_record_name = ?)")
            arguments += [user, user]
        }
        if let route = search.route {
            conditions.append("instr(route, ?) > 0")
            arguments.append(route)
        }
        if let error = search.error {
            conditions.append("(error = ? OR instr(item_errors, ?) > 0)")
            arguments += [error, "," + error + ","]
        }
        if let since = search.since {
            conditions.append("at >= ?")
            arguments.append(since)
        }
        if let before = search.beforeID {
            conditions.append("id < ?")
            arguments.append(before)
        }
        let whereClause = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        arguments.append(search.limit)
        let sql = """
            SELECT id, at, node, uuid, method, route, container, environment, database, user_record_name, user_name, status,
                error, item_errors, ms FROM requests \(whereClause) ORDER BY id DESC LIMIT ?
            """
        let bound = StatementArguments(arguments) ?? StatementArguments()
        return try await pool.read { db in
            try Row.fetchAll(db, sql: sql, arguments: bound).map { row in
                StoredRequest(
                    id: row[0], at: row[1], node: row[2], requestUUID: row[3], method: row[4], route: row[5], container: row[6],
                    environment: row[7], database: row[8], userRecordName: row[9], userName: row[10], status: row[11],
                    serverErrorCode: row[12],
                    itemErrorCodes: (row[13] as String?).map { $0.split(separator: ",").map(String.init) } ?? [],
                    milliseconds: row[14])
            }
        }
    }

    public func minuteFigures(since time: Int64) async throws -> [StoredMinuteFigures] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT minute, node, container, requests, server_errors, errors, latency FROM request_minutes WHERE minute >= ?
                    """, arguments: [time]
            ).map { row in
                StoredMinuteFigures(
                    minute: row[0], node: row[1], container: row[2], requests: row[3], serverErrors: row[4], errorsText: row[5],
                    latencyText: row[6])
            }
        }
    }

    public func pruneRequests(before time: Int64, keepingAtMost rows: Int) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM request_minutes WHERE minute < ?", arguments: [time])
            try db.execute(sql: "DELETE FROM requests WHERE at < ?", arguments: [time])
            var removed = db.changesCount
            try db.execute(
                sql: "DELETE FROM requests WHERE id <= (SELECT id FROM requests ORDER BY id DESC LIMIT 1 OFFSET ?)",
                arguments: [max(0, rows)])
            removed += db.changesCount
            return removed
        }
    }

    public func close() throws { try pool.close() }

    /// Where the writer keeps its temporary storage, statement journals included: SQLite's
    /// `temp_store` (2: memory; for tests).
    func writerTemporaryStorage() async throws -> Int {
        try await pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA temp_store") ?? 0 }
    }
}
