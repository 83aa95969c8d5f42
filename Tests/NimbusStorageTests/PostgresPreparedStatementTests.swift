import NimbusStorage
import NimbusTestSupport
import PostgresNIO
import Testing

@testable import NimbusPostgres

/// The PostgreSQL driver names the statements it repeats (`PostgresPreparedStatements`): one
/// connection here, so what `pg_prepared_statements` lists is what the driver's statements made.
@Suite(.enabled(if: PostgresTestCluster.url != nil, "needs the test cluster"))
struct PostgresPreparedStatementTests {
    static func withStorage(_ body: (PostgresStorage) async throws -> Void) async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 1)
            do {
                try await body(storage)
            } catch {
                await storage.close()
                throw error
            }
            await storage.close()
        }
    }

    static func prepared(_ storage: PostgresStorage, _ sql: String) async throws -> Int64 {
        let rows = try await storage.rows(
            PostgresQuery(unsafeSQL: "SELECT count(*) FROM pg_prepared_statements WHERE statement = \(PostgresQuery.quoted(sql))"))
        return try rows.first?.decode(Int64.self) ?? 0
    }

    @Test func aRepeatedStatementIsPreparedOnceAndAnswersEveryCall() async throws {
        try await Self.withStorage { storage in
            let sql = "SELECT $1::int8 + 1"
            for value in Int64(1)...8 {
                var bindings = PostgresBindings()
                bindings.append(value)
                let rows = try await storage.rows(PostgresQuery(unsafeSQL: sql, binds: bindings))
                let sum = try rows.first?.decode(Int64.self)
                expectEqual(sum, value + 1)
            }
            let count = try await Self.prepared(storage, sql)
            expectEqual(count, 1)
        }
    }

    /// A NULL has no type: a text first called with one is named only once a call binds a
    /// value, with that value's type, and a NULL afterwards still fits.
    @Test func aTextIsNamedWithTheTypesOfACallWithoutNulls() async throws {
        try await Self.withStorage { storage in
            let sql = "SELECT coalesce($1, 'none')"
            func call(_ value: String?) async throws -> String? {
                var bindings = PostgresBindings()
                bindings.append(value)
                return try await storage.rows(PostgresQuery(unsafeSQL: sql, binds: bindings)).first?.decode(String.self)
            }
            let first = try await call(nil)
            let preparedAfterNull = try await Self.prepared(storage, sql)
            let second = try await call("a")
            let preparedAfterValue = try await Self.prepared(storage, sql)
            let third = try await call(nil)
            let fourth = try await call("b")
            #expect(first == "none" && second == "a" && third == "none" && fourth == "b")
            #expect(preparedAfterNull == 0 && preparedAfterValue == 1)
        }
    }

    /// Another node's migration changes a table under a named statement: PostgreSQL refuses the
    /// old plan ("cached plan must not change result type"), and the driver prepares the text
    /// again under a new name instead of failing the request.
    @Test func aStatementWhoseTableChangedIsPreparedAfresh() async throws {
        try await Self.withStorage { storage in
            try await storage.rows("CREATE TABLE widened (a int8)")
            try await storage.rows("INSERT INTO widened VALUES (1)")
            let sql = "SELECT * FROM widened"
            let before = try await storage.rows(PostgresQuery(unsafeSQL: sql)).first?.decode(Int64.self)
            let prepared = try await Self.prepared(storage, sql)
            #expect(before == 1 && prepared == 1)
            try await storage.rows("ALTER TABLE widened ADD COLUMN b int8 DEFAULT 2")
            let after = try #require(try await storage.rows(PostgresQuery(unsafeSQL: sql)).first).decode((Int64, Int64).self)
            #expect(after.0 == 1 && after.1 == 2)
        }
    }

    /// A statement that is wrong fails as it did unnamed, is not retried into success, and says
    /// what PostgreSQL said (postgres-nio's own description of the error hides it).
    @Test func aWrongStatementStillFailsAndSaysWhy() async throws {
        try await Self.withStorage { storage in
            for _ in 0..<2 {
                do {
                    try await storage.rows("SELECT * FROM no_such_table")
                    Issue.record("a statement on a missing table succeeded")
                } catch {
                    #expect("\(error)".contains("42P01") && "\(error)".contains("no_such_table"), "\(error)")
                }
            }
            let rows = try await storage.rows("SELECT 1")
            expectEqual(rows.count, 1)
        }
    }
}

extension PostgresQuery {
    /// `text` as a SQL string literal.
    static func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
}
