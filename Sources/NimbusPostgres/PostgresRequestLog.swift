import NimbusStorage
import PostgresNIO

/// The lasting request log on PostgreSQL (`RequestLogStore`): one table every node writes,
/// a batch per statement (`unnest` over one array per column).
struct PostgresRequestLog: RequestLogStore {
    let storage: PostgresStorage

    func appendRequests(_ rows: [StoredRequest], minuteFigures figures: [StoredMinuteFigures]) async throws {
        guard !rows.isEmpty || !figures.isEmpty else { return }
        // Arrays of optionals do not bind: "" stands for none, and NULLIF puts it back.
        func text(_ value: String?) -> String { value ?? "" }
        let items = rows.map { $0.itemErrorCodes.isEmpty ? "" : "," + $0.itemErrorCodes.joined(separator: ",") + "," }
        // One statement, so one transaction: the entries and the figures that count them. The
        // columns are unnested in the select list, side by side a row at a time: unnested in FROM,
        // PostgreSQL runs the function to its end into a tuplestore first, and a batch is every
        // request the node answered in a second (as PostgresApply's inserts, docs/benchmarks.md).
        try await storage.rows(
            """
            WITH logged AS (
                INSERT INTO request_log (at, node, uuid, method, route, container, environment, database, user_record_name, user_name,
                    status, error, item_errors, ms)
                SELECT at, node, uuid, method, route, NULLIF(container, ''), NULLIF(environment, ''), NULLIF(database, ''),
                    NULLIF(user_record_name, ''), NULLIF(user_name, ''), status, NULLIF(error, ''), NULLIF(item_errors, ''), ms
                FROM (
                    SELECT unnest(\(rows.map(\.at))) AS at, unnest(\(rows.map(\.node))) AS node,
                        unnest(\(rows.map(\.requestUUID))) AS uuid, unnest(\(rows.map(\.method))) AS method,
                        unnest(\(rows.map(\.route))) AS route, unnest(\(rows.map { text($0.container) })) AS container,
                        unnest(\(rows.map { text($0.environment) })) AS environment, unnest(\(rows.map { text($0.database) })) AS database,
                        unnest(\(rows.map { text($0.userRecordName) })) AS user_record_name,
                        unnest(\(rows.map { text($0.userName) })) AS user_name, unnest(\(rows.map { Int32($0.status) })) AS status,
                        unnest(\(rows.map { text($0.serverErrorCode) })) AS error, unnest(\(items)) AS item_errors,
                        unnest(\(rows.map(\.milliseconds))) AS ms
                ) AS r
                RETURNING 1
            )
            INSERT INTO request_minutes (minute, node, container, requests, server_errors, errors, latency)
            SELECT * FROM unnest(\(figures.map(\.minute)), \(figures.map(\.node)), \(figures.map(\.container)),
                \(figures.map { Int32($0.requests) }), \(figures.map { Int32($0.serverErrors) }), \(figures.map(\.errorsText)),
                \(figures.map(\.latencyText)))
            """)
    }

    func requests(_ search: RequestSearch) async throws -> [StoredRequest] {
        var sql = """
            SELECT id, at, node, uuid, method, route, container, environment, database, user_record_name, user_name, status,
                error, item_errors, ms FROM request_log WHERE true
            """
        var bindings = PostgresBindings()
        func bind(_ value: some PostgresDynamicTypeEncodable) -> String {
            bindings.append(value)
            return "$\(bindings.count)"
        }
        if let visible = search.visibleContainers { sql += " AND container = ANY(\(bind(visible.sorted())))" }
        if let container = search.container { sql += " AND container = \(bind(container))" }
        if let environment = search.environment { sql += " AND environment = \(bind(environment))" }
        if let database = search.database { sql += " AND database = \(bind(database))" }
        if let user = search.user {
            let marker = bind(user)
            sql += " AND (user_name = \(marker) OR user_record_name = \(marker))"
        }
        if let route = search.route { sql += " AND strpos(route, \(bind(route))) > 0" }
        if let error = search.error {
            sql += " AND (error = \(bind(error)) OR strpos(item_errors, \(bind("," + error + ","))) > 0)"
        }
        if let since = search.since { sql += " AND at >= \(bind(since))" }
        if let before = search.beforeID { sql += " AND id < \(bind(before))" }
        sql += " ORDER BY id DESC LIMIT \(bind(Int64(search.limit)))"
        return try await storage.rows(PostgresQuery(unsafeSQL: sql, binds: bindings)).map { row in
            let c = try row.decode(
                (Int64, Int64, String, String, String, String, String?, String?, String?, String?, String?, Int32, String?, String?, Double)
                    .self, context: .default)
            return StoredRequest(
                id: c.0, at: c.1, node: c.2, requestUUID: c.3, method: c.4, route: c.5, container: c.6, environment: c.7, database: c.8,
                userRecordName: c.9, userName: c.10, status: Int(c.11), serverErrorCode: c.12,
                itemErrorCodes: c.13.map { $0.split(separator: ",").map(String.init) } ?? [], milliseconds: c.14)
        }
    }

    func minuteFigures(since time: Int64) async throws -> [StoredMinuteFigures] {
        try await storage.rows(
            "SELECT minute, node, container, requests, server_errors, errors, latency FROM request_minutes WHERE minute >= \(time)"
        ).map { row in
            let c = try row.decode((Int64, String, String, Int32, Int32, String, String).self, context: .default)
            return StoredMinuteFigures(
                minute: c.0, node: c.1, container: c.2, requests: Int(c.3), serverErrors: Int(c.4), errorsText: c.5, latencyText: c.6)
        }
    }

    func pruneRequests(before time: Int64, keepingAtMost rows: Int) async throws -> Int {
        try await storage.rows("DELETE FROM request_minutes WHERE minute < \(time)")
        var removed = 0
        for row in try await storage.rows(
            """
            WITH old AS (DELETE FROM request_log WHERE at < \(time) RETURNING 1),
                 over AS (DELETE FROM request_log WHERE id <= (SELECT id FROM request_log ORDER BY id DESC LIMIT 1 OFFSET \(Int64(max(0, rows)))) RETURNING 1)
            SELECT (SELECT count(*) FROM old) + (SELECT count(*) FROM over)
            """)
        {
            removed = Int(try row.decode(Int64.self))
        }
        return removed
    }
}

extension PostgresStorage: RequestLogStoring {
    public var requestLog: (any RequestLogStore)? { PostgresRequestLog(storage: self) }
}

extension PostgresCoarseStorage: RequestLogStoring {
    public var requestLog: (any RequestLogStore)? { storage.requestLog }
}
