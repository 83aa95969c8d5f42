import Foundation
import GRDB
import NimbusStorage
import NimbusWire

/// `AccountStore` on SQLite: reads on the calling thread (as point reads), writes through
/// group commit, each call one transaction.
struct SQLiteAccountStore: AccountStore {
    let storage: SQLiteStorage

    func containers() async throws -> [ContainerRow] {
        try storage.readPoint { try $0.containers() }
    }

    func createContainer(_ row: ContainerRow) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard try tx.container(id: row.id) == nil else { return false }
            try tx.insertContainer(row)
            return true
        }
    }

    func createAPIToken(_ row: APITokenRow) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard try tx.container(id: row.container) != nil else { return false }
            try tx.insertAPIToken(row)
            return true
        }
    }

    func revokeAPITokens(container: String, environment: Environment?) async throws -> Int {
        try await storage.writeSQLite { try $0.revokeAPITokens(container: container, environment: environment) }
    }

    func apiTokens(container: String) async throws -> [APITokenRow] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                "SELECT \(SQLiteTransaction.apiTokenColumns) FROM api_tokens WHERE container = ? ORDER BY created_at, token_hash",
                [container]
            ).map(SQLiteTransaction.apiTokenRow)
        }
    }

    func revokeAPIToken(container: String, id: String) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "UPDATE api_tokens SET revoked = 1 WHERE container = ? AND substr(token_hash, 1, ?) = ? AND revoked = 0",
                [container, APITokenRow.idLength, id])
            return tx.db.changesCount > 0
        }
    }

    func touchAPIToken(tokenHash: String, at time: Int64) async throws {
        try await storage.writeSQLite { try $0.execute("UPDATE api_tokens SET last_used_at = ? WHERE token_hash = ?", [time, tokenHash]) }
    }

    func credentials(apiTokenHash: String?, sessionHash: String?) async throws -> StoredCredentials {
        try storage.readPoint { tx in
            let token = try apiTokenHash.flatMap { try tx.apiToken(hash: $0) }
            let session = try sessionHash.flatMap { try tx.session(tokenHash: $0) }
            let user = try session.flatMap { try tx.user(id: $0.userID) }
            return StoredCredentials(apiToken: token, session: session.flatMap { session in user.map { (session, $0) } })
        }
    }

    func user(name: String) async throws -> UserRow? {
        try storage.readPoint { try $0.user(name: name) }
    }

    func users(afterID: Int64, limit: Int) async throws -> [UserRow] {
        try storage.readPoint { tx in
            try tx.fetchRows("SELECT \(SQLiteTransaction.userColumns) FROM users WHERE id > ? ORDER BY id LIMIT ?", [afterID, Int64(limit)])
                .map(tx.userRow)
        }
    }

    func setUserPassword(name: String, passwordHash: String) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard let user = try tx.user(name: name) else { return false }
            try tx.execute("UPDATE users SET password_hash = ? WHERE id = ?", [passwordHash, user.id])
            _ = try tx.deleteSessions(userID: user.id)
            return true
        }
    }

    func createUser(name: String, passwordHash: String, createdAt: Int64, profile: UserProfile) async throws -> UserInsert {
        try await storage.writeSQLite { tx in
            guard try tx.user(name: name) == nil else { return .nameTaken }
            if let email = profile.emailAddress, try tx.fetchRow("SELECT 1 FROM users WHERE email = ?", [email]) != nil {
                return .emailTaken
            }
            if let phone = profile.phoneNumber, try tx.fetchRow("SELECT 1 FROM users WHERE phone = ?", [phone]) != nil {
                return .phoneTaken
            }
            try tx.execute(
                "INSERT INTO users (name, password_hash, created_at, email, phone, name_components) VALUES (?, ?, ?, ?, ?, ?)",
                [name, passwordHash, createdAt, profile.emailAddress, profile.phoneNumber,
                 profile.nameComponents.storedText])
            return .created(UserRow(id: tx.db.lastInsertedRowID, name: name, passwordHash: passwordHash, createdAt: createdAt))
        }
    }

    func profile(userID: Int64) async throws -> UserProfile? {
        try storage.readPoint { tx in
            try tx.fetchRow("SELECT email, phone, name_components FROM users WHERE id = ?", [userID]).map { row in
                SQLiteTransaction.profile(row, from: 0)
            }
        }
    }

    func join(_ member: ContainerMember) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute(
                """
                INSERT OR IGNORE INTO container_members (container, user_id, record_name, discoverable, joined_at)
                VALUES (?, ?, ?, ?, ?)
                """,
                [member.container, member.userID, member.userRecordName, member.discoverable, member.joinedAt])
        }
    }

    func memberCount(container: String) async throws -> Int64 {
        try storage.readPoint { tx in
            try tx.fetchRow("SELECT count(*) FROM container_members WHERE container = ?", [container])?[0] ?? 0
        }
    }

    func member(container: String, userID: Int64) async throws -> ContainerMember? {
        try storage.readPoint { tx in
            try tx.fetchRow(
                "SELECT \(SQLiteTransaction.memberColumns) FROM container_members m WHERE container = ? AND user_id = ?",
                [container, userID]
            ).map { SQLiteTransaction.member($0) }
        }
    }

    func setDiscoverable(container: String, userID: Int64, _ discoverable: Bool) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "UPDATE container_members SET discoverable = ? WHERE container = ? AND user_id = ?",
                [discoverable, container, userID])
            return tx.db.changesCount > 0
        }
    }

    func directory(container: String, lookups: [UserLookup]) async throws -> [DirectoryEntry] {
        let (emails, phones, names) = lookups.grouped
        var clauses: [String] = []
        var arguments: [(any DatabaseValueConvertible)?] = [container]
        for (column, values) in [("u.email", emails), ("u.phone", phones), ("m.record_name", names)] where !values.isEmpty {
            clauses.append("\(column) IN (\(Array(repeating: "?", count: values.count).joined(separator: ", ")))")
            arguments.append(contentsOf: values.map { $0 as (any DatabaseValueConvertible)? })
        }
        guard !clauses.isEmpty else { return [] }
        return try storage.readPoint { tx in
            try tx.fetchRows(
                """
                SELECT \(SQLiteTransaction.memberColumns), u.email, u.phone, u.name_components
                FROM container_members m JOIN users u ON u.id = m.user_id
                WHERE m.container = ? AND (\(clauses.joined(separator: " OR ")))
                """,
                StatementArguments(arguments)
            ).map(SQLiteTransaction.directoryEntry)
        }
    }

    func discoverableMembers(container: String, limit: Int) async throws -> [DirectoryEntry] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                """
                SELECT \(SQLiteTransaction.memberColumns), u.email, u.phone, u.name_components
                FROM container_members m JOIN users u ON u.id = m.user_id
                WHERE m.container = ? AND m.discoverable = 1
                ORDER BY m.joined_at, m.user_id LIMIT ?
                """,
                [container, limit]
            ).map(SQLiteTransaction.directoryEntry)
        }
    }

    func members(container: String, afterUserID: Int64, limit: Int) async throws -> [NamedMember] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                """
                SELECT \(SQLiteTransaction.memberColumns), u.email, u.phone, u.name_components, u.name
                FROM container_members m JOIN users u ON u.id = m.user_id
                WHERE m.container = ? AND m.user_id > ?
                ORDER BY m.user_id LIMIT ?
                """,
                [container, afterUserID, limit]
            ).map { NamedMember(userName: $0[8], entry: SQLiteTransaction.directoryEntry($0)) }
        }
    }

    func sessions(userID: Int64) async throws -> [SessionRow] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                """
                SELECT token_hash, user_id, container, environment, created_at, last_used_at FROM sessions
                WHERE user_id = ? ORDER BY created_at DESC, token_hash
                """,
                [userID]
            ).map(SQLiteTransaction.sessionRow)
        }
    }

    func containerSettings(container: String) async throws -> ContainerSettings {
        try storage.readPoint { tx in
            try tx.fetchRow("SELECT user_discovery, sign_up, limits FROM container_settings WHERE container = ?", [container])
                .map { ContainerSettings(userDiscovery: $0[0], signUp: $0[1], limits: ContainerSettings.limits(fromText: $0[2])) }
                ?? ContainerSettings()
        }
    }

    func setContainerSettings(container: String, _ settings: ContainerSettings) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard try tx.container(id: container) != nil else { return false }
            try tx.execute(
                """
                INSERT INTO container_settings (container, user_discovery, sign_up, limits) VALUES (?, ?, ?, ?)
                ON CONFLICT (container) DO UPDATE SET user_discovery = excluded.user_discovery, sign_up = excluded.sign_up,
                    limits = excluded.limits
                """,
                [container, settings.userDiscovery, settings.signUp, settings.limitsText])
            return true
        }
    }

    func startSession(_ row: SessionRow, removingSessionsIdleBefore idleBefore: Int64) async throws {
        try await storage.writeSQLite { tx in
            try tx.insertSession(row)
            _ = try tx.deleteSessions(idleBefore: idleBefore)
        }
    }

    func touchSession(tokenHash: String, at time: Int64) async throws {
        try await storage.writeSQLite { try $0.touchSession(tokenHash: tokenHash, at: time) }
    }

    func endSession(tokenHash: String) async throws {
        try await storage.writeSQLite { try $0.deleteSession(tokenHash: tokenHash) }
    }

    func endSessions(userName: String) async throws -> Int? {
        try await storage.writeSQLite { tx in
            guard let user = try tx.user(name: userName) else { return nil }
            return try tx.deleteSessions(userID: user.id)
        }
    }

    func setUserDisabled(name: String, _ disabled: Bool) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard let user = try tx.user(name: name) else { return false }
            try tx.execute("UPDATE users SET disabled = ? WHERE id = ?", [disabled, user.id])
            if disabled { _ = try tx.deleteSessions(userID: user.id) }
            return true
        }
    }

    func deleteUser(id: Int64) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard try tx.user(id: id) != nil else { return false }
            // Sessions, memberships, roles and linked identities go with the row (ON DELETE CASCADE).
            for table in ["push_tokens", "badges", "notifications", "sealed_keys", "device_sync"] {
                try tx.execute("DELETE FROM \(table) WHERE user_id = ?", [id])
            }
            try tx.execute("DELETE FROM users WHERE id = ?", [id])
            return true
        }
    }

    func addServerKey(_ row: ServerKeyRow) async throws -> ServerKeyInsert {
        try await storage.writeSQLite { tx in
            guard try tx.container(id: row.container) != nil else { return .noContainer }
            guard try tx.serverKey(id: row.keyID) == nil else { return .duplicate }
            try tx.execute(
                """
                INSERT INTO server_keys (key_id, container, environment, public_key, created_at, revoked)
                VALUES (?, ?, ?, ?, ?, ?)
                """,
                [row.keyID, row.container, row.environment.rawValue, row.publicKeyPEM, row.createdAt, row.isRevoked])
            return .added
        }
    }

    func serverKey(id: String) async throws -> ServerKeyRow? {
        try storage.readPoint { try $0.serverKey(id: id) }
    }

    func serverKeys(container: String) async throws -> [ServerKeyRow] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                "SELECT \(SQLiteTransaction.serverKeyColumns) FROM server_keys WHERE container = ? ORDER BY created_at, key_id",
                [container]
            ).map(SQLiteTransaction.serverKeyRow)
        }
    }

    func revokeServerKey(id: String) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute("UPDATE server_keys SET revoked = 1 WHERE key_id = ? AND revoked = 0", [id])
            return tx.db.changesCount > 0
        }
    }

    func admitSignature(_ signatureHash: String, keepUntil: Int64, now: Int64) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM used_signatures WHERE keep_until < ?", [now])
            try tx.execute(
                "INSERT OR IGNORE INTO used_signatures (signature_hash, keep_until) VALUES (?, ?)",
                [signatureHash, keepUntil])
            return tx.db.changesCount > 0
        }
    }

    func putIdentityProvider(_ row: IdentityProviderRow) async throws -> Bool {
        try await storage.writeSQLite { tx in
            guard try tx.container(id: row.container) != nil else { return false }
            try tx.execute(
                """
                INSERT INTO identity_providers (container, issuer, audience, jwks_source, created_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (container, issuer) DO UPDATE SET audience = excluded.audience, jwks_source = excluded.jwks_source
                """,
                [row.container, row.issuer, row.audience, row.jwksSource, row.createdAt])
            return true
        }
    }

    func noteSchemaRefusals(container: String, environment: Environment, _ missing: [String: Int64], at time: Int64) async throws {
        try await storage.writeSQLite { tx in
            for (what, count) in missing {
                try tx.execute(
                    """
                    INSERT INTO schema_refusals (container, environment, missing, count, last_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (container, environment, missing) DO UPDATE SET count = count + excluded.count, last_at = max(last_at, excluded.last_at)
                    """, [container, environment.rawValue, what, count, time])
            }
        }
    }

    func schemaRefusals(container: String?, environment: Environment) async throws -> [SchemaRefusalRow] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                """
                SELECT container, missing, count, last_at FROM schema_refusals
                WHERE environment = ? AND (? IS NULL OR container = ?) ORDER BY last_at DESC, missing
                """, [environment.rawValue, container, container]
            ).map { SchemaRefusalRow(container: $0[0], environment: environment, missing: $0[1], count: $0[2], lastAt: $0[3]) }
        }
    }

    func identityProviders(container: String) async throws -> [IdentityProviderRow] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                "SELECT container, issuer, audience, jwks_source, created_at FROM identity_providers WHERE container = ? ORDER BY issuer",
                [container]
            ).map { IdentityProviderRow(container: $0[0], issuer: $0[1], audience: $0[2], jwksSource: $0[3], createdAt: $0[4]) }
        }
    }

    func removeIdentityProvider(container: String, issuer: String) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM identity_providers WHERE container = ? AND issuer = ?", [container, issuer])
            return tx.db.changesCount > 0
        }
    }

    func linkedUser(issuer: String, subject: String) async throws -> UserRow? {
        try storage.readPoint { tx in
            try tx.fetchRow("SELECT user_id FROM external_identities WHERE issuer = ? AND subject = ?", [issuer, subject])
                .flatMap { try tx.user(id: $0[0]) }
        }
    }

    func link(issuer: String, subject: String, userID: Int64) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "INSERT OR IGNORE INTO external_identities (issuer, subject, user_id) VALUES (?, ?, ?)", [issuer, subject, userID])
            return tx.db.changesCount > 0
        }
    }

    func securityState() async throws -> SecurityState {
        try storage.readPoint { tx in
            var state = SecurityState()
            func key(_ row: Row) -> SecurityState.ScopeKey {
                SecurityState.ScopeKey(container: row[0], environment: Environment(rawValue: row[1]) ?? .development)
            }
            for row in try tx.fetchRows("SELECT container, environment, name FROM security_roles") {
                state.scopes[key(row), default: SecurityScope()].roles.insert(row[2])
            }
            for row in try tx.fetchRows("SELECT container, environment, record_type, role, permissions FROM security_grants") {
                state.scopes[key(row), default: SecurityScope()].grants[row[2], default: [:]][row[3]] = RecordPermissions(rawValue: row[4])
            }
            for row in try tx.fetchRows("SELECT container, environment, user_id, role FROM role_assignments") {
                state.scopes[key(row), default: SecurityScope()].assignments[row[2], default: []].insert(row[3])
            }
            return state
        }
    }

    func createRole(container: String, environment: Environment, name: String, createdAt: Int64) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "INSERT OR IGNORE INTO security_roles (container, environment, name, created_at) VALUES (?, ?, ?, ?)",
                [container, environment.rawValue, name, createdAt])
            return tx.db.changesCount > 0
        }
    }

    func setGrant(container: String, environment: Environment, _ grant: SecurityGrant) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute(
                """
                INSERT INTO security_grants (container, environment, record_type, role, permissions) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (container, environment, record_type, role) DO UPDATE SET permissions = excluded.permissions
                """,
                [container, environment.rawValue, grant.recordType, grant.role, grant.permissions.rawValue])
        }
    }

    func assignRole(container: String, environment: Environment, userID: Int64, role: String, assigned: Bool) async throws -> Bool {
        try await storage.writeSQLite { tx in
            if assigned {
                try tx.execute(
                    "INSERT OR IGNORE INTO role_assignments (container, environment, user_id, role) VALUES (?, ?, ?, ?)",
                    [container, environment.rawValue, userID, role])
            } else {
                try tx.execute(
                    "DELETE FROM role_assignments WHERE container = ? AND environment = ? AND user_id = ? AND role = ?",
                    [container, environment.rawValue, userID, role])
            }
            return tx.db.changesCount > 0
        }
    }
}

/// The statements behind it.
extension SQLiteTransaction {
    static let apiTokenColumns =
        "token_hash, container, environment, created_at, revoked, allowed_origins, sign_in_callback, name, last_used_at"

    static func apiTokenRow(_ row: Row) -> APITokenRow {
        APITokenRow(
            tokenHash: row["token_hash"], container: row["container"],
            environment: Environment(rawValue: row["environment"]) ?? .development,
            createdAt: row["created_at"], isRevoked: row["revoked"],
            allowedOrigins: (row["allowed_origins"] as String).split(separator: "\n").map(String.init),
            signInCallback: row["sign_in_callback"], name: row["name"], lastUsedAt: row["last_used_at"])
    }

    func apiToken(hash: String) throws -> APITokenRow? {
        try fetchRow("SELECT \(Self.apiTokenColumns) FROM api_tokens WHERE token_hash = ?", [hash]).map(Self.apiTokenRow)
    }

    static let userColumns = "id, name, password_hash, created_at, disabled"

    func userRow(_ row: Row) -> UserRow {
        UserRow(
            id: row["id"], name: row["name"], passwordHash: row["password_hash"], createdAt: row["created_at"], isDisabled: row["disabled"])
    }

    func user(name: String) throws -> UserRow? {
        try fetchRow("SELECT \(Self.userColumns) FROM users WHERE name = ?", [name]).map(userRow)
    }

    func user(id: Int64) throws -> UserRow? {
        try fetchRow("SELECT \(Self.userColumns) FROM users WHERE id = ?", [id]).map(userRow)
    }

    static let serverKeyColumns = "key_id, container, environment, public_key, created_at, revoked"

    static func serverKeyRow(_ row: Row) -> ServerKeyRow {
        ServerKeyRow(
            keyID: row["key_id"], container: row["container"],
            environment: Environment(rawValue: row["environment"]) ?? .development, publicKeyPEM: row["public_key"],
            createdAt: row["created_at"], isRevoked: row["revoked"])
    }

    func serverKey(id: String) throws -> ServerKeyRow? {
        try fetchRow("SELECT \(Self.serverKeyColumns) FROM server_keys WHERE key_id = ?", [id]).map(Self.serverKeyRow)
    }

    /// A `container_members m` row's columns, in `member`'s order.
    static let memberColumns = "m.container, m.user_id, m.record_name, m.discoverable, m.joined_at"

    static func member(_ row: Row) -> ContainerMember {
        ContainerMember(
            container: row[0], userID: row[1], userRecordName: row[2], discoverable: row[3] as Bool?, joinedAt: row[4])
    }

    /// `email, phone, name_components` from column `first` on.
    static func profile(_ row: Row, from first: Int) -> UserProfile {
        UserProfile(
            emailAddress: row[first], phoneNumber: row[first + 1], nameComponents: NameComponents(storedText: row[first + 2]))
    }

    static func directoryEntry(_ row: Row) -> DirectoryEntry {
        DirectoryEntry(member: member(row), profile: profile(row, from: 5))
    }

    func session(tokenHash: String) throws -> SessionRow? {
        try fetchRow(
            "SELECT token_hash, user_id, container, environment, created_at, last_used_at FROM sessions WHERE token_hash = ?",
            [tokenHash]
        ).map(Self.sessionRow)
    }

    static func sessionRow(_ row: Row) -> SessionRow {
        SessionRow(
            tokenHash: row["token_hash"], userID: row["user_id"], container: row["container"],
            environment: Environment(rawValue: row["environment"]) ?? .development,
            createdAt: row["created_at"], lastUsedAt: row["last_used_at"])
    }

    func insertContainer(_ row: ContainerRow) throws {
        try execute("INSERT INTO containers (id, created_at) VALUES (?, ?)", [row.id, row.createdAt])
    }

    func insertAPIToken(_ row: APITokenRow) throws {
        try execute(
            """
            INSERT INTO api_tokens (token_hash, container, environment, created_at, revoked, allowed_origins, sign_in_callback, name)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [row.tokenHash, row.container, row.environment.rawValue, row.createdAt, row.isRevoked,
             row.allowedOrigins.joined(separator: "\n"), row.signInCallback, row.name])
    }

    func revokeAPITokens(container: String, environment: Environment?) throws -> Int {
        if let environment {
            try execute(
                "UPDATE api_tokens SET revoked = 1 WHERE container = ? AND environment = ? AND revoked = 0",
                [container, environment.rawValue])
        } else {
            try execute("UPDATE api_tokens SET revoked = 1 WHERE container = ? AND revoked = 0", [container])
        }
        return db.changesCount
    }

    func insertSession(_ row: SessionRow) throws {
        try execute(
            """
            INSERT INTO sessions (token_hash, user_id, container, environment, created_at, last_used_at)
            VALUES (?, ?, ?, ?, ?, ?)
            """,
            [row.tokenHash, row.userID, row.container, row.environment.rawValue, row.createdAt, row.lastUsedAt])
    }

    func touchSession(tokenHash: String, at time: Int64) throws {
        try execute("UPDATE sessions SET last_used_at = ? WHERE token_hash = ?", [time, tokenHash])
    }

    func deleteSession(tokenHash: String) throws {
        try execute("DELETE FROM sessions WHERE token_hash = ?", [tokenHash])
    }

    func deleteSessions(userID: Int64) throws -> Int {
        try execute("DELETE FROM sessions WHERE user_id = ?", [userID])
        return db.changesCount
    }

    func deleteSessions(idleBefore time: Int64) throws -> Int {
        try execute("DELETE FROM sessions WHERE last_used_at < ?", [time])
        return db.changesCount
    }
}
