import NimbusStorage
import PostgresNIO

/// `OperatorStore` on PostgreSQL.
struct PostgresOperatorStore: OperatorStore {
    let storage: PostgresStorage

    private static let operatorColumns =
        "name, password_hash, role, containers, created_at, totp_secret, totp_pending, disabled, password_expires_at"

    func createOperator(_ row: OperatorRow) async throws -> Bool {
        let stored = OperatorContainers.stored(row.containers)
        return try await !storage.rows(
            """
            INSERT INTO operators (\(unescaped: Self.operatorColumns))
            VALUES (\(row.name), \(row.passwordHash), \(row.role.rawValue), \(stored), \(row.createdAt), \(row.secondFactor),
                \(row.pendingSecondFactor), \(row.disabled), \(row.passwordExpiresAt))
            ON CONFLICT (name) DO NOTHING RETURNING 1
            """
        ).isEmpty
    }

    func operatorAccount(name: String) async throws -> OperatorRow? {
        try await storage.rows("SELECT \(unescaped: Self.operatorColumns) FROM operators WHERE name = \(name)").first.map(
            Self.operatorRow)
    }

    func operators() async throws -> [OperatorRow] {
        try await storage.rows("SELECT \(unescaped: Self.operatorColumns) FROM operators ORDER BY name").map(Self.operatorRow)
    }

    func setOperatorPassword(name: String, passwordHash: String, expiresAt: Int64?) async throws -> Bool {
        try await !storage.rows(
            "UPDATE operators SET password_hash = \(passwordHash), password_expires_at = \(expiresAt) WHERE name = \(name) RETURNING 1"
        ).isEmpty
    }

    func updateOperator(name: String, role: OperatorRole, containers: [String]?, disabled: Bool) async throws -> Bool {
        // One statement: the update, and a disabled operator's sessions ended with it.
        try await !storage.rows(
            """
            WITH changed AS (
                UPDATE operators SET role = \(role.rawValue), containers = \(OperatorContainers.stored(containers)), disabled = \(disabled)
                WHERE name = \(name) RETURNING name, disabled
            ), ended AS (
                DELETE FROM operator_sessions WHERE operator_name IN (SELECT name FROM changed WHERE disabled)
            )
            SELECT 1 FROM changed
            """
        ).isEmpty
    }

    func deleteOperator(name: String) async throws -> Bool {
        // Sessions go with it (ON DELETE CASCADE).
        try await !storage.rows("DELETE FROM operators WHERE name = \(name) RETURNING 1").isEmpty
    }

    func endOperatorSessions(name: String) async throws {
        try await storage.rows("DELETE FROM operator_sessions WHERE operator_name = \(name)")
    }

    func setOperatorSecondFactor(name: String, secret: String?, pendingSecret: String?) async throws {
        try await storage.rows("UPDATE operators SET totp_secret = \(secret), totp_pending = \(pendingSecret) WHERE name = \(name)")
    }

    func claimOperatorCodeStep(name: String, step: Int64) async throws -> Bool {
        try await !storage.rows(
            """
            UPDATE operators SET totp_last_step = \(step)
            WHERE name = \(name) AND (totp_last_step IS NULL OR totp_last_step < \(step)) RETURNING 1
            """
        ).isEmpty
    }

    func startOperatorSession(_ row: OperatorSessionRow, removingSessionsIdleBefore idleBefore: Int64, now: Int64) async throws {
        try await storage.rows(
            """
            WITH started AS (
                INSERT INTO operator_sessions (token_hash, operator_name, csrf_token, created_at, last_seen_at, expires_at)
                VALUES (\(row.tokenHash), \(row.operatorName), \(row.csrfToken), \(row.createdAt), \(row.lastSeenAt), \(row.expiresAt))
            )
            DELETE FROM operator_sessions WHERE last_seen_at < \(idleBefore) OR expires_at < \(now)
            """)
    }

    func operatorSession(tokenHash: String) async throws -> OperatorSessionRow? {
        try await storage.rows(
            """
            SELECT token_hash, operator_name, csrf_token, created_at, last_seen_at, expires_at
            FROM operator_sessions WHERE token_hash = \(tokenHash)
            """
        ).first.map { row in
            let (hash, name, csrf, created, seen, expires) = try row.decode((String, String, String, Int64, Int64, Int64).self)
            return OperatorSessionRow(tokenHash: hash, operatorName: name, csrfToken: csrf, createdAt: created, lastSeenAt: seen, expiresAt: expires)
        }
    }

    func touchOperatorSession(tokenHash: String, at time: Int64) async throws {
        try await storage.rows("UPDATE operator_sessions SET last_seen_at = \(time) WHERE token_hash = \(tokenHash)")
    }

    func endOperatorSession(tokenHash: String) async throws {
        try await storage.rows("DELETE FROM operator_sessions WHERE token_hash = \(tokenHash)")
    }

    func appendAudit(_ entry: AuditEntry) async throws {
        try await storage.rows(
            """
            INSERT INTO operator_audit (at, operator_name, action, container, detail)
            VALUES (\(entry.at), \(entry.operatorName), \(entry.action), \(entry.container), \(entry.detail))
            """)
    }

    func pruneAudit(before time: Int64, keepingAtMost entries: Int) async throws -> Int {
        var removed = 0
        for row in try await storage.rows(
            """
            WITH old AS (DELETE FROM operator_audit WHERE at < \(time) RETURNING 1),
                 over AS (DELETE FROM operator_audit
                          WHERE id <= (SELECT id FROM operator_audit ORDER BY id DESC LIMIT 1 OFFSET \(Int64(max(0, entries)))) RETURNING 1)
            SELECT (SELECT count(*) FROM old) + (SELECT count(*) FROM over)
            """)
        {
            removed = Int(try row.decode(Int64.self))
        }
        return removed
    }

    func auditEntries(limit: Int, beforeID: Int64?) async throws -> [AuditEntry] {
        try await storage.rows(
            """
            SELECT id, at, operator_name, action, container, detail FROM operator_audit
            WHERE id < \(beforeID ?? Int64.max) ORDER BY id DESC LIMIT \(Int64(limit))
            """
        ).map { row in
            let (id, at, name, action, container, detail) = try row.decode((Int64, Int64, String, String, String?, String).self)
            return AuditEntry(id: id, at: at, operatorName: name, action: action, container: container, detail: detail)
        }
    }

    private static func operatorRow(_ row: PostgresRow) throws -> OperatorRow {
        let (name, hash, roleName, containers, created, secret, pending, disabled, expires) = try row.decode(
            (String, String, String, String?, Int64, String?, String?, Bool, Int64?).self)
        guard let role = OperatorRole(rawValue: roleName) else { throw StorageError.corrupt("operator role '\(roleName)' is unknown") }
        return OperatorRow(name: name, passwordHash: hash, role: role, containers: OperatorContainers.read(containers), createdAt: created,
            secondFactor: secret, pendingSecondFactor: pending, disabled: disabled, passwordExpiresAt: expires)
    }
}
