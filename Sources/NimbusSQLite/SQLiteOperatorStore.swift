import Foundation
import GRDB
import NimbusStorage

/// `OperatorStore` on SQLite.
struct SQLiteOperatorStore: OperatorStore {
    let storage: SQLiteStorage

    private static let operatorColumns =
        "name, password_hash, role, containers, created_at, totp_secret, totp_pending, disabled, password_expires_at"
    private static let sessionColumns = "token_hash, operator_name, csrf_token, created_at, last_seen_at, expires_at"

    func createOperator(_ row: OperatorRow) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "INSERT INTO operators (\(Self.operatorColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                [
                    row.name, row.passwordHash, row.role.rawValue, OperatorContainers.stored(row.containers), row.createdAt, row.secondFactor,
                    row.pendingSecondFactor, row.disabled, row.passwordExpiresAt,
                ])
            return tx.db.changesCount > 0
        }
    }

    func operatorAccount(name: String) async throws -> OperatorRow? {
        try storage.readPoint { try $0.fetchRow("SELECT \(Self.operatorColumns) FROM operators WHERE name = ?", [name]).map(Self.operatorRow) }
    }

    func operators() async throws -> [OperatorRow] {
        try storage.readPoint { try $0.fetchRows("SELECT \(Self.operatorColumns) FROM operators ORDER BY name").map(Self.operatorRow) }
    }

    func setOperatorPassword(name: String, passwordHash: String, expiresAt: Int64?) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "UPDATE operators SET password_hash = ?, password_expires_at = ? WHERE name = ?", [passwordHash, expiresAt, name])
            return tx.db.changesCount > 0
        }
    }

    func updateOperator(name: String, role: OperatorRole, containers: [String]?, disabled: Bool) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "UPDATE operators SET role = ?, containers = ?, disabled = ? WHERE name = ?",
                [role.rawValue, OperatorContainers.stored(containers), disabled, name])
            let found = tx.db.changesCount > 0
            if disabled { try tx.execute("DELETE FROM operator_sessions WHERE operator_name = ?", [name]) }
            return found
        }
    }

    func deleteOperator(name: String) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM operator_sessions WHERE operator_name = ?", [name])
            try tx.execute("DELETE FROM operators WHERE name = ?", [name])
            return tx.db.changesCount > 0
        }
    }

    func endOperatorSessions(name: String) async throws {
        try await storage.writeSQLite { try $0.execute("DELETE FROM operator_sessions WHERE operator_name = ?", [name]) }
    }

    func setOperatorSecondFactor(name: String, secret: String?, pendingSecret: String?) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute("UPDATE operators SET totp_secret = ?, totp_pending = ? WHERE name = ?", [secret, pendingSecret, name])
        }
    }

    func claimOperatorCodeStep(name: String, step: Int64) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "UPDATE operators SET totp_last_step = ? WHERE name = ? AND (totp_last_step IS NULL OR totp_last_step < ?)",
                [step, name, step])
            return tx.db.changesCount > 0
        }
    }

    func startOperatorSession(_ row: OperatorSessionRow, removingSessionsIdleBefore idleBefore: Int64, now: Int64) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM operator_sessions WHERE last_seen_at < ? OR expires_at < ?", [idleBefore, now])
            try tx.execute(
                "INSERT INTO operator_sessions (\(Self.sessionColumns)) VALUES (?, ?, ?, ?, ?, ?)",
                [row.tokenHash, row.operatorName, row.csrfToken, row.createdAt, row.lastSeenAt, row.expiresAt])
        }
    }

    func operatorSession(tokenHash: String) async throws -> OperatorSessionRow? {
        try storage.readPoint {
            try $0.fetchRow("SELECT \(Self.sessionColumns) FROM operator_sessions WHERE token_hash = ?", [tokenHash]).map { row in
                OperatorSessionRow(
                    tokenHash: row["token_hash"], operatorName: row["operator_name"], csrfToken: row["csrf_token"],
                    createdAt: row["created_at"], lastSeenAt: row["last_seen_at"], expiresAt: row["expires_at"])
            }
        }
    }

    func touchOperatorSession(tokenHash: String, at time: Int64) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute("UPDATE operator_sessions SET last_seen_at = ? WHERE token_hash = ?", [time, tokenHash])
        }
    }

    func endOperatorSession(tokenHash: String) async throws {
        try await storage.writeSQLite { tx in try tx.execute("DELETE FROM operator_sessions WHERE token_hash = ?", [tokenHash]) }
    }

    func appendAudit(_ entry: AuditEntry) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "INSERT INTO operator_audit (at, operator_name, action, container, detail) VALUES (?, ?, ?, ?, ?)",
                [entry.at, entry.operatorName, entry.action, entry.container, entry.detail])
        }
    }

    func pruneAudit(before time: Int64, keepingAtMost entries: Int) async throws -> Int {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM operator_audit WHERE at < ?", [time])
            var removed = tx.db.changesCount
            try tx.execute(
                "DELETE FROM operator_audit WHERE id <= (SELECT id FROM operator_audit ORDER BY id DESC LIMIT 1 OFFSET ?)", [max(0, entries)])
            removed += tx.db.changesCount
            return removed
        }
    }

    func auditEntries(limit: Int, beforeID: Int64?) async throws -> [AuditEntry] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                "SELECT id, at, operator_name, action, container, detail FROM operator_audit WHERE id < ? ORDER BY id DESC LIMIT ?",
                [beforeID ?? Int64.max, limit]
            ).map { row in
                AuditEntry(
                    id: row["id"], at: row["at"], operatorName: row["operator_name"], action: row["action"], container: row["container"],
                    detail: row["detail"])
            }
        }
    }

    private static func operatorRow(_ row: Row) throws -> OperatorRow {
        let roleName: String = row["role"]
        guard let role = OperatorRole(rawValue: roleName) else { throw StorageError.corrupt("operator role '\(roleName)' is unknown") }
        return OperatorRow(
            name: row["name"], passwordHash: row["password_hash"], role: role, containers: OperatorContainers.read(row["containers"]),
            createdAt: row["created_at"], secondFactor: row["totp_secret"], pendingSecondFactor: row["totp_pending"],
            disabled: row["disabled"], passwordExpiresAt: row["password_expires_at"])
    }
}
