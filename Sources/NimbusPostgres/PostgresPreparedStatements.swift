import Logging
import PostgresNIO
import Synchronization

/// Server-side prepared statements for the SQL the driver sends again and again.
///
/// postgres-nio sends a `PostgresQuery` as an unnamed statement: PostgreSQL parses, analyses and
/// plans it on every call. For the driver's short statements that is most of the work: a
/// lookup's statements spent about 0.1 ms parsing and 0.13–0.2 ms binding (planning) each
/// against 0.02–0.06 ms executing, and the filtered list's page 1.7 ms planning against 1.2 ms
/// executing (issue 35's measurements). A named statement is parsed once per connection, and
/// after five executions PostgreSQL keeps a generic plan when it is no worse than the custom
/// ones, so a repeated statement costs its execution and little else.
///
/// Each distinct SQL text gets a name, the same on every connection; postgres-nio prepares it
/// on a connection the first time that connection runs it and keeps it for the connection's
/// life. The parameters' types are those of the first call that binds no NULL: every
/// placeholder of the driver's SQL is bound from one Swift type at one place in the code, so a
/// text fixes its parameters' types (a NULL, typeless, fits any). At most `capacity` texts are
/// named per process (every connection may hold each, and PostgreSQL keeps their plans in the
/// backend's memory); texts past that run unnamed, as before, and so does a text PostgreSQL
/// refuses to prepare.
///
/// A pooler in transaction mode that does not track protocol-level prepared statements
/// (PgBouncer before 1.21, or without `max_prepared_statements`) cannot carry named statements;
/// docs/scale-out.md says how to run behind one.
final class PostgresPreparedStatements: Sendable {
    /// How many distinct statements get names.
    static let capacity = 256
    /// Calls of a text binding NULLs before it is left unnamed for good (each costs reading the
    /// parameters' types again).
    static let callsToSettle = 16

    private enum Entry {
        case named(String, types: [PostgresDataType])
        /// Runs unnamed: refused by PostgreSQL, or never called without a NULL.
        case unnamed
        /// Called this many times, each binding a NULL: its types are not known yet.
        case unsettled(calls: Int)
    }

    private struct Names {
        var bySQL: [String: Entry] = [:]
        var named = 0
        /// Names are never reused, so a text renamed (its cached plan no longer fits the table)
        /// is prepared afresh on every connection.
        var made = 0
    }

    private let names = Mutex(Names())

    /// Runs `query` on `connection` as a named statement, or unnamed when it cannot have one.
    func rows(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> [PostgresRow] {
        guard let (name, types) = name(for: query) else { return try await connection.query(query, logger: logger).collect() }
        do {
            return try await NamedStatement.$current.withValue(NamedStatement.Text(name: name, sql: query.sql, types: types)) {
                var rows: [PostgresRow] = []
                for try await row in try await connection.execute(NamedStatement(bindings: query.binds), logger: logger) {
                    rows.append(row)
                }
                return rows
            }
        } catch let error as PSQLError {
            // A statement that fails runs in a transaction of its own and changes nothing, so
            // running it again unnamed is safe; only failures of the name itself are retried.
            switch error.serverInfo?[.sqlState] {
            case let state? where state.hasPrefix("42"):
                // Refused at parse or analysis: run it unnamed from now on.
                settle(query.sql, name: name, as: .unnamed)
            case "0A000":
                // "cached plan must not change result type": a table changed under the
                // statement (a migration by another node). A new name prepares it afresh.
                settle(query.sql, name: name, as: nil)
            default:
                throw error
            }
            return try await connection.query(query, logger: logger).collect()
        }
    }

    /// The text's name and parameter types, naming it now if it can be.
    private func name(for query: PostgresQuery) -> (String, [PostgresDataType])? {
        let calls: Int
        switch names.withLock({ names -> Entry? in
            // Texts past the capacity run unnamed without being remembered (nor their types read).
            names.bySQL[query.sql] ?? (names.named < Self.capacity ? nil : .unnamed)
        }) {
        case .named(let name, let types)?: return (name, types)
        case .unnamed?: return nil
        case .unsettled(let count)?: calls = count
        case nil: calls = 0
        }
        // Read outside the lock: it is the one costly step, and a text settles after one call.
        let types = Self.parameterTypes(query.binds)
        return names.withLock { names in
            if case .named(let name, let types)? = names.bySQL[query.sql] { return (name, types) }
            guard names.named < Self.capacity else { return nil }
            guard !types.contains(.null) else {
                names.bySQL[query.sql] = calls + 1 >= Self.callsToSettle ? .unnamed : .unsettled(calls: calls + 1)
                return nil
            }
            names.made += 1
            names.named += 1
            let name = "nimbus_\(names.made)"
            names.bySQL[query.sql] = .named(name, types: types)
            return (name, types)
        }
    }

    /// Takes the text's name back (if it is still `name`): to run it unnamed, or (nil) to name it afresh.
    private func settle(_ sql: String, name: String, as entry: Entry?) {
        names.withLock { names in
            guard case .named(name, _)? = names.bySQL[sql] else { return }
            names.named -= 1
            names.bySQL[sql] = entry
        }
    }

    /// The type of each parameter, as postgres-nio sends them with an unnamed statement (a
    /// NULL is `.null`, "unspecified"). postgres-nio keeps them to itself, so they are read by
    /// reflection, once per text: a few microseconds for a long statement.
    static func parameterTypes(_ bindings: PostgresBindings) -> [PostgresDataType] {
        guard let metadata = Mirror(reflecting: bindings).children.first(where: { $0.label == "metadata" })?.value else { return [] }
        return Mirror(reflecting: metadata).children.map { element in
            Mirror(reflecting: element.value).children.first(where: { $0.label == "dataType" })?.value as? PostgresDataType ?? .null
        }
    }
}

/// One named statement, as postgres-nio's `PostgresPreparedStatement` wants it. That protocol
/// takes the name, SQL and parameter types as static members (one Swift type per statement);
/// the driver's SQL is made at run time, so they come from a task-local value set around the
/// one call of `PostgresConnection.execute` that reads them (`PostgresPreparedStatements.rows`).
private struct NamedStatement: PostgresPreparedStatement {
    struct Text: Sendable {
        let name: String
        let sql: String
        let types: [PostgresDataType]
    }

    @TaskLocal static var current: Text?

    static var name: String { current?.name ?? "" }
    static var sql: String { current?.sql ?? "" }
    static var bindingDataTypes: [PostgresDataType] { current?.types ?? [] }

    typealias Row = PostgresRow
    let bindings: PostgresBindings

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
