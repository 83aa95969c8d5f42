import NimbusStorage
import PostgresNIO

/// `AccountStore` on PostgreSQL: every call one statement, so one round trip. "Create unless
/// it exists" is `ON CONFLICT DO NOTHING … RETURNING`, which answers whether it did without a
/// second look (and without a race between looking and inserting).
struct PostgresAccountStore: AccountStore {
    let storage: PostgresStorage

    func containers() async throws -> [ContainerRow] {
        try await storage.rows("SELECT id, created_at FROM containers ORDER BY id").map(Self.container)
    }

    func createContainer(_ row: ContainerRow) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO containers (id, created_at) VALUES (\(row.id), \(row.createdAt))
            ON CONFLICT (id) DO NOTHING RETURNING id
            """
        ).isEmpty
    }

    func createAPIToken(_ row: APITokenRow) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO api_tokens (token_hash, container, environment, created_at, revoked, allowed_origins)
            SELECT \(row.tokenHash), id, \(row.environment.rawValue), \(row.createdAt), \(row.isRevoked),
                   \(row.allowedOrigins.joined(separator: "\n"))
            FROM containers WHERE id = \(row.container)
            RETURNING token_hash
            """
        ).isEmpty
    }

    func revokeAPITokens(container: String, environment: Environment?) async throws -> Int {
        try await storage.rows(
            """
            UPDATE api_tokens SET revoked = true
            WHERE container = \(container) AND (\(environment?.rawValue)::text IS NULL OR environment = \(environment?.rawValue))
              AND NOT revoked
            RETURNING token_hash
            """
        ).count
    }

    func credentials(apiTokenHash: String?, sessionHash: String?) async throws -> StoredCredentials {
        // One row whatever matches: the left joins hang the token and the session (with its
        // user) off a constant row.
        let rows = try await storage.rows(
            """
            SELECT t.token_hash, t.container, t.environment, t.created_at, t.revoked, t.allowed_origins,
                   s.token_hash, s.user_id, s.container, s.environment, s.created_at, s.last_used_at,
                   u.name, u.password_hash, u.created_at
            FROM (SELECT 1) AS one
            LEFT JOIN api_tokens t ON t.token_hash = \(apiTokenHash)
            LEFT JOIN sessions s ON s.token_hash = \(sessionHash)
            LEFT JOIN users u ON u.id = s.user_id
            """)
        guard let row = rows.first else { return StoredCredentials() }
        let (
            tokenHash, tokenContainer, tokenEnvironment, tokenCreated, revoked, origins,
            sessionToken, userID, sessionContainer, sessionEnvironment, sessionCreated, lastUsed,
            userName, passwordHash, userCreated
        ) = try row.decode(
            (String?, String?, String?, Int64?, Bool?, String?,
             String?, Int64?, String?, String?, Int64?, Int64?,
             String?, String?, Int64?).self)
        var found = StoredCredentials()
        if let tokenHash, let tokenContainer, let tokenEnvironment, let tokenCreated, let revoked, let origins {
            found.apiToken = APITokenRow(
                tokenHash: tokenHash, container: tokenContainer,
                environment: Environment(rawValue: tokenEnvironment) ?? .development, createdAt: tokenCreated,
                isRevoked: revoked, allowedOrigins: origins.split(separator: "\n").map(String.init))
        }
        if let sessionToken, let userID, let sessionContainer, let sessionEnvironment, let sessionCreated, let lastUsed,
            let userName, let passwordHash, let userCreated
        {
            found.session = (
                SessionRow(
                    tokenHash: sessionToken, userID: userID, container: sessionContainer,
                    environment: Environment(rawValue: sessionEnvironment) ?? .development, createdAt: sessionCreated,
                    lastUsedAt: lastUsed),
                UserRow(id: userID, name: userName, passwordHash: passwordHash, createdAt: userCreated)
            )
        }
        return found
    }

    func user(name: String) async throws -> UserRow? {
        try await storage.rows("SELECT id, name, password_hash, created_at FROM users WHERE name = \(name)").first.map(Self.user)
    }

    func createUser(name: String, passwordHash: String, createdAt: Int64) async throws -> UserRow? {
        try await storage.rows(
            """
            INSERT INTO users (name, password_hash, created_at) VALUES (\(name), \(passwordHash), \(createdAt))
            ON CONFLICT (name) DO NOTHING
            RETURNING id, name, password_hash, created_at
            """
        ).first.map(Self.user)
    }

    func startSession(_ row: SessionRow, removingSessionsIdleBefore idleBefore: Int64) async throws {
        // One statement: the delete sees the snapshot from before the insert, and the new
        // session is not idle anyway.
        try await storage.rows(
            """
            WITH started AS (
                INSERT INTO sessions (token_hash, user_id, container, environment, created_at, last_used_at)
                VALUES (\(row.tokenHash), \(row.userID), \(row.container), \(row.environment.rawValue), \(row.createdAt),
                        \(row.lastUsedAt))
            )
            DELETE FROM sessions WHERE last_used_at < \(idleBefore)
            """)
    }

    func touchSession(tokenHash: String, at time: Int64) async throws {
        try await storage.rows("UPDATE sessions SET last_used_at = \(time) WHERE token_hash = \(tokenHash)")
    }

    func endSession(tokenHash: String) async throws {
        try await storage.rows("DELETE FROM sessions WHERE token_hash = \(tokenHash)")
    }

    func endSessions(userName: String) async throws -> Int? {
        let rows = try await storage.rows(
            """
            WITH named AS (SELECT id FROM users WHERE name = \(userName)),
                 ended AS (DELETE FROM sessions WHERE user_id IN (SELECT id FROM named) RETURNING 1)
            SELECT (SELECT count(*) FROM named), (SELECT count(*) FROM ended)
            """)
        guard let (users, ended) = try rows.first?.decode((Int64, Int64).self), users > 0 else { return nil }
        return Int(ended)
    }

    func addServerKey(_ row: ServerKeyRow) async throws -> ServerKeyInsert {
        // One statement answers all three ways: whether the container exists, and whether the
        // insert happened.
        let rows = try await storage.rows(
            """
            WITH owner AS (SELECT id FROM containers WHERE id = \(row.container)),
                 added AS (
                     INSERT INTO server_keys (key_id, container, environment, public_key, created_at, revoked)
                     SELECT \(row.keyID), id, \(row.environment.rawValue), \(row.publicKeyPEM), \(row.createdAt),
                            \(row.isRevoked)
                     FROM owner
                     ON CONFLICT (key_id) DO NOTHING
                     RETURNING 1)
            SELECT (SELECT count(*) FROM owner), (SELECT count(*) FROM added)
            """)
        guard let (owners, added) = try rows.first?.decode((Int64, Int64).self), owners > 0 else { return .noContainer }
        return added > 0 ? .added : .duplicate
    }

    func serverKey(id: String) async throws -> ServerKeyRow? {
        try await storage.rows("SELECT \(unescaped: Self.serverKeyColumns) FROM server_keys WHERE key_id = \(id)")
            .first.map(Self.serverKey)
    }

    func serverKeys(container: String) async throws -> [ServerKeyRow] {
        try await storage.rows(
            """
            SELECT \(unescaped: Self.serverKeyColumns) FROM server_keys WHERE container = \(container)
            ORDER BY created_at, key_id
            """
        ).map(Self.serverKey)
    }

    func revokeServerKey(id: String) async throws -> Bool {
        try await !storage.rows(
            "UPDATE server_keys SET revoked = true WHERE key_id = \(id) AND NOT revoked RETURNING key_id"
        ).isEmpty
    }

    func admitSignature(_ signatureHash: String, keepUntil: Int64, now: Int64) async throws -> Bool {
        let rows = try await storage.rows(
            """
            WITH swept AS (DELETE FROM used_signatures WHERE keep_until < \(now))
            INSERT INTO used_signatures (signature_hash, keep_until) VALUES (\(signatureHash), \(keepUntil))
            ON CONFLICT (signature_hash) DO NOTHING
            RETURNING 1
            """)
        return !rows.isEmpty
    }

    static let serverKeyColumns = "key_id, container, environment, public_key, created_at, revoked"

    private static func serverKey(_ row: PostgresRow) throws -> ServerKeyRow {
        let (keyID, container, environment, publicKey, createdAt, revoked) = try row.decode(
            (String, String, String, String, Int64, Bool).self)
        return ServerKeyRow(
            keyID: keyID, container: container, environment: Environment(rawValue: environment) ?? .development,
            publicKeyPEM: publicKey, createdAt: createdAt, isRevoked: revoked)
    }

    /// A row of `id, created_at`.
    static func container(_ row: PostgresRow) throws -> ContainerRow {
        let (id, createdAt) = try row.decode((String, Int64).self)
        return ContainerRow(id: id, createdAt: createdAt)
    }

    private static func user(_ row: PostgresRow) throws -> UserRow {
        let (id, name, passwordHash, createdAt) = try row.decode((Int64, String, String, Int64).self)
        return UserRow(id: id, name: name, passwordHash: passwordHash, createdAt: createdAt)
    }
}
