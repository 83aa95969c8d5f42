import NimbusStorage
import NimbusWire
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
            INSERT INTO api_tokens (token_hash, container, environment, created_at, revoked, allowed_origins, sign_in_callback, name)
            SELECT \(row.tokenHash), id, \(row.environment.rawValue), \(row.createdAt), \(row.isRevoked),
                   \(row.allowedOrigins.joined(separator: "\n")), \(row.signInCallback), \(row.name)
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

    func apiTokens(container: String) async throws -> [APITokenRow] {
        try await storage.rows(
            """
            SELECT token_hash, container, environment, created_at, revoked, allowed_origins, sign_in_callback, name, last_used_at
            FROM api_tokens WHERE container = \(container) ORDER BY created_at, token_hash
            """
        ).map { row in
            let (hash, container, environment, created, revoked, origins, callback, name, lastUsed) = try row.decode(
                (String, String, String, Int64, Bool, String, String?, String?, Int64?).self)
            return APITokenRow(
                tokenHash: hash, container: container, environment: Environment(rawValue: environment) ?? .development,
                createdAt: created, isRevoked: revoked, allowedOrigins: origins.split(separator: "\n").map(String.init),
                signInCallback: callback, name: name, lastUsedAt: lastUsed)
        }
    }

    func revokeAPIToken(container: String, id: String) async throws -> Bool {
        try await !storage.rows(
            """
            UPDATE api_tokens SET revoked = true
            WHERE container = \(container) AND left(token_hash, \(Int32(APITokenRow.idLength))) = \(id) AND NOT revoked
            RETURNING token_hash
            """
        ).isEmpty
    }

    func touchAPIToken(tokenHash: String, at time: Int64) async throws {
        try await storage.rows("UPDATE api_tokens SET last_used_at = \(time) WHERE token_hash = \(tokenHash)")
    }

    func credentials(apiTokenHash: String?, sessionHash: String?) async throws -> StoredCredentials {
        // One row whatever matches: the left joins hang the token and the session (with its
        // user) off a constant row.
        let rows = try await storage.rows(
            """
            SELECT t.token_hash, t.container, t.environment, t.created_at, t.revoked, t.allowed_origins, t.sign_in_callback,
                   t.name, t.last_used_at, s.token_hash, s.user_id, s.container, s.environment, s.created_at, s.last_used_at,
                   u.name, u.password_hash, u.created_at, u.disabled
            FROM (SELECT 1) AS one
            LEFT JOIN api_tokens t ON t.token_hash = \(apiTokenHash)
            LEFT JOIN sessions s ON s.token_hash = \(sessionHash)
            LEFT JOIN users u ON u.id = s.user_id
            """)
        guard let row = rows.first else { return StoredCredentials() }
        let (
            tokenHash, tokenContainer, tokenEnvironment, tokenCreated, revoked, origins, callback, tokenName, tokenUsed,
            sessionToken, userID, sessionContainer, sessionEnvironment, sessionCreated, lastUsed,
            userName, passwordHash, userCreated, userDisabled
        ) = try row.decode(
            (String?, String?, String?, Int64?, Bool?, String?, String?, String?, Int64?,
             String?, Int64?, String?, String?, Int64?, Int64?,
             String?, String?, Int64?, Bool?).self)
        var found = StoredCredentials()
        if let tokenHash, let tokenContainer, let tokenEnvironment, let tokenCreated, let revoked, let origins {
            found.apiToken = APITokenRow(
                tokenHash: tokenHash, container: tokenContainer,
                environment: Environment(rawValue: tokenEnvironment) ?? .development, createdAt: tokenCreated,
                isRevoked: revoked, allowedOrigins: origins.split(separator: "\n").map(String.init), signInCallback: callback,
                name: tokenName, lastUsedAt: tokenUsed)
        }
        if let sessionToken, let userID, let sessionContainer, let sessionEnvironment, let sessionCreated, let lastUsed,
            let userName, let passwordHash, let userCreated
        {
            found.session = (
                SessionRow(
                    tokenHash: sessionToken, userID: userID, container: sessionContainer,
                    environment: Environment(rawValue: sessionEnvironment) ?? .development, createdAt: sessionCreated,
                    lastUsedAt: lastUsed),
                UserRow(id: userID, name: userName, passwordHash: passwordHash, createdAt: userCreated, isDisabled: userDisabled ?? false)
            )
        }
        return found
    }

    func user(name: String) async throws -> UserRow? {
        try await storage.rows("SELECT \(unescaped: Self.userColumns) FROM users WHERE name = \(name)").first.map(Self.user)
    }

    func users(afterID: Int64, limit: Int) async throws -> [UserRow] {
        try await storage.rows(
            "SELECT \(unescaped: Self.userColumns) FROM users WHERE id > \(afterID) ORDER BY id LIMIT \(Int64(limit))"
        ).map(Self.user)
    }

    func setUserPassword(name: String, passwordHash: String) async throws -> Bool {
        let rows = try await storage.rows(
            """
            WITH changed AS (UPDATE users SET password_hash = \(passwordHash) WHERE name = \(name) RETURNING id),
                 ended AS (DELETE FROM sessions WHERE user_id IN (SELECT id FROM changed) RETURNING 1)
            SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM ended)
            """)
        guard let (changed, _) = try rows.first?.decode((Int64, Int64).self) else { return false }
        return changed > 0
    }

    func createUser(name: String, passwordHash: String, createdAt: Int64, profile: UserProfile) async throws -> UserInsert {
        // One statement: which of name, email and phone is taken, and the insert when none is
        // (a race past the look still meets the unique constraints: `duplicate`).
        let names = profile.nameComponents.storedText
        let rows = try await storage.rows(
            """
            WITH taken AS (
                SELECT EXISTS (SELECT 1 FROM users WHERE name = \(name)) AS name,
                       EXISTS (SELECT 1 FROM users WHERE email = \(profile.emailAddress)) AS email,
                       EXISTS (SELECT 1 FROM users WHERE phone = \(profile.phoneNumber)) AS phone),
                 created AS (
                     INSERT INTO users (name, password_hash, created_at, email, phone, name_components)
                     SELECT \(name), \(passwordHash), \(createdAt), \(profile.emailAddress), \(profile.phoneNumber), \(names)
                     FROM taken WHERE NOT (name OR email OR phone)
                     RETURNING id)
            SELECT taken.name, taken.email, taken.phone, (SELECT id FROM created) FROM taken
            """)
        guard let (nameTaken, emailTaken, phoneTaken, id) = try rows.first?.decode((Bool, Bool, Bool, Int64?).self) else {
            throw StorageError.unavailable("creating a user returned no row")
        }
        if nameTaken { return .nameTaken }
        if emailTaken { return .emailTaken }
        if phoneTaken { return .phoneTaken }
        guard let id else { throw StorageError.unavailable("creating a user returned no id") }
        return .created(UserRow(id: id, name: name, passwordHash: passwordHash, createdAt: createdAt))
    }

    func profile(userID: Int64) async throws -> UserProfile? {
        try await storage.rows("SELECT email, phone, name_components FROM users WHERE id = \(userID)").first.map {
            let (email, phone, names) = try $0.decode((String?, String?, String).self)
            return Self.profile(email: email, phone: phone, names: names)
        }
    }

    func join(_ member: ContainerMember) async throws {
        try await storage.rows(
            """
            INSERT INTO container_members (container, user_id, record_name, discoverable, joined_at)
            VALUES (\(member.container), \(member.userID), \(member.userRecordName), \(member.discoverable), \(member.joinedAt))
            ON CONFLICT DO NOTHING
            """)
    }

    func memberCount(container: String) async throws -> Int64 {
        try await storage.rows("SELECT count(*) FROM container_members WHERE container = \(container)").first?
            .decode(Int64.self) ?? 0
    }

    func member(container: String, userID: Int64) async throws -> ContainerMember? {
        try await storage.rows(
            """
            SELECT \(unescaped: Self.memberColumns) FROM container_members m
            WHERE container = \(container) AND user_id = \(userID)
            """
        ).first.map { try Self.member($0.decode((String, Int64, String, Bool?, Int64).self)) }
    }

    func setDiscoverable(container: String, userID: Int64, _ discoverable: Bool) async throws -> Bool {
        try await !storage.rows(
            """
            UPDATE container_members SET discoverable = \(discoverable)
            WHERE container = \(container) AND user_id = \(userID) RETURNING 1
            """
        ).isEmpty
    }

    func directory(container: String, lookups: [UserLookup]) async throws -> [DirectoryEntry] {
        let (emails, phones, names) = lookups.grouped
        guard !lookups.isEmpty else { return [] }
        return try await storage.rows(
            """
            SELECT \(unescaped: Self.memberColumns), u.email, u.phone, u.name_components
            FROM container_members m JOIN users u ON u.id = m.user_id
            WHERE m.container = \(container)
              AND (u.email = ANY(\(emails)) OR u.phone = ANY(\(phones)) OR m.record_name = ANY(\(names)))
            """
        ).map(Self.directoryEntry)
    }

    func discoverableMembers(container: String, limit: Int) async throws -> [DirectoryEntry] {
        try await storage.rows(
            """
            SELECT \(unescaped: Self.memberColumns), u.email, u.phone, u.name_components
            FROM container_members m JOIN users u ON u.id = m.user_id
            WHERE m.container = \(container) AND m.discoverable
            ORDER BY m.joined_at, m.user_id LIMIT \(limit)
            """
        ).map(Self.directoryEntry)
    }

    func members(container: String, afterUserID: Int64, limit: Int) async throws -> [NamedMember] {
        try await storage.rows(
            """
            SELECT \(unescaped: Self.memberColumns), u.email, u.phone, u.name_components, u.name
            FROM container_members m JOIN users u ON u.id = m.user_id
            WHERE m.container = \(container) AND m.user_id > \(afterUserID)
            ORDER BY m.user_id LIMIT \(limit)
            """
        ).map { row in
            let (container, userID, recordName, discoverable, joinedAt, email, phone, names, userName) = try row.decode(
                (String, Int64, String, Bool?, Int64, String?, String?, String, String).self)
            return NamedMember(
                userName: userName,
                entry: DirectoryEntry(
                    member: Self.member((container, userID, recordName, discoverable, joinedAt)),
                    profile: Self.profile(email: email, phone: phone, names: names)))
        }
    }

    func sessions(userID: Int64) async throws -> [SessionRow] {
        try await storage.rows(
            """
            SELECT token_hash, container, environment, created_at, last_used_at FROM sessions
            WHERE user_id = \(userID) ORDER BY created_at DESC, token_hash
            """
        ).map { row in
            let (hash, container, environment, created, lastUsed) = try row.decode((String, String, String, Int64, Int64).self)
            return SessionRow(
                tokenHash: hash, userID: userID, container: container, environment: Environment(rawValue: environment) ?? .development,
                createdAt: created, lastUsedAt: lastUsed)
        }
    }

    func containerSettings(container: String) async throws -> ContainerSettings {
        guard
            let row = try await storage.rows(
                "SELECT user_discovery, sign_up, limits FROM container_settings WHERE container = \(container)"
            ).first
        else { return ContainerSettings() }
        let (discovery, signUp, limits) = try row.decode((Bool, Bool, String).self)
        return ContainerSettings(userDiscovery: discovery, signUp: signUp, limits: ContainerSettings.limits(fromText: limits))
    }

    func setContainerSettings(container: String, _ settings: ContainerSettings) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO container_settings (container, user_discovery, sign_up, limits)
            SELECT id, \(settings.userDiscovery), \(settings.signUp), \(settings.limitsText) FROM containers WHERE id = \(container)
            ON CONFLICT (container) DO UPDATE SET user_discovery = excluded.user_discovery, sign_up = excluded.sign_up,
                limits = excluded.limits
            RETURNING 1
            """
        ).isEmpty
    }

    func putIdentityProvider(_ row: IdentityProviderRow) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO identity_providers (container, issuer, audience, jwks_source, created_at)
            SELECT id, \(row.issuer), \(row.audience), \(row.jwksSource), \(row.createdAt) FROM containers WHERE id = \(row.container)
            ON CONFLICT (container, issuer) DO UPDATE SET audience = excluded.audience, jwks_source = excluded.jwks_source
            RETURNING 1
            """
        ).isEmpty
    }

    func noteSchemaRefusals(container: String, environment: Environment, _ missing: [String: Int64], at time: Int64) async throws {
        for (what, count) in missing {
            try await storage.rows(
                """
                INSERT INTO schema_refusals (container, environment, missing, count, last_at)
                VALUES (\(container), \(environment.rawValue), \(what), \(count), \(time))
                ON CONFLICT (container, environment, missing)
                DO UPDATE SET count = schema_refusals.count + excluded.count, last_at = greatest(schema_refusals.last_at, excluded.last_at)
                """)
        }
    }

    func schemaRefusals(container: String?, environment: Environment) async throws -> [SchemaRefusalRow] {
        try await storage.rows(
            """
            SELECT container, missing, count, last_at FROM schema_refusals
            WHERE environment = \(environment.rawValue) AND (\(container)::text IS NULL OR container = \(container))
            ORDER BY last_at DESC, missing
            """
        ).map {
            let (container, missing, count, lastAt) = try $0.decode((String, String, Int64, Int64).self)
            return SchemaRefusalRow(container: container, environment: environment, missing: missing, count: count, lastAt: lastAt)
        }
    }

    func identityProviders(container: String) async throws -> [IdentityProviderRow] {
        try await storage.rows(
            """
            SELECT container, issuer, audience, jwks_source, created_at FROM identity_providers
            WHERE container = \(container) ORDER BY issuer
            """
        ).map {
            let (container, issuer, audience, source, createdAt) = try $0.decode((String, String, String, String, Int64).self)
            return IdentityProviderRow(container: container, issuer: issuer, audience: audience, jwksSource: source, createdAt: createdAt)
        }
    }

    func removeIdentityProvider(container: String, issuer: String) async throws -> Bool {
        try await !storage.rows(
            "DELETE FROM identity_providers WHERE container = \(container) AND issuer = \(issuer) RETURNING 1"
        ).isEmpty
    }

    func linkedUser(issuer: String, subject: String) async throws -> UserRow? {
        try await storage.rows(
            """
            SELECT u.id, u.name, u.password_hash, u.created_at, u.disabled FROM external_identities e JOIN users u ON u.id = e.user_id
            WHERE e.issuer = \(issuer) AND e.subject = \(subject)
            """
        ).first.map(Self.user)
    }

    func link(issuer: String, subject: String, userID: Int64) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO external_identities (issuer, subject, user_id) VALUES (\(issuer), \(subject), \(userID))
            ON CONFLICT DO NOTHING RETURNING 1
            """
        ).isEmpty
    }

    func securityState() async throws -> SecurityState {
        // One statement: the three tables as one row set, told apart by their first column.
        let rows = try await storage.rows(
            """
            SELECT 0, container, environment, name, NULL::bigint, NULL::integer FROM security_roles
            UNION ALL
            SELECT 1, container, environment, record_type || ' ' || role, NULL, permissions FROM security_grants
            UNION ALL
            SELECT 2, container, environment, role, user_id, NULL FROM role_assignments
            """)
        var state = SecurityState()
        for row in rows {
            let (kind, container, environment, text, userID, permissions) = try row.decode(
                (Int32, String, String, String, Int64?, Int32?).self)
            let key = SecurityState.ScopeKey(container: container, environment: Environment(rawValue: environment) ?? .development)
            switch kind {
            case 0: state.scopes[key, default: SecurityScope()].roles.insert(text)
            case 1:
                // Record types and roles are identifiers: a space cannot be in either.
                let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { continue }
                state.scopes[key, default: SecurityScope()].grants[parts[0], default: [:]][parts[1]] =
                    RecordPermissions(rawValue: Int(permissions ?? 0))
            default:
                if let userID { state.scopes[key, default: SecurityScope()].assignments[userID, default: []].insert(text) }
            }
        }
        return state
    }

    func createRole(container: String, environment: Environment, name: String, createdAt: Int64) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO security_roles (container, environment, name, created_at)
            VALUES (\(container), \(environment.rawValue), \(name), \(createdAt))
            ON CONFLICT DO NOTHING RETURNING 1
            """
        ).isEmpty
    }

    func setGrant(container: String, environment: Environment, _ grant: SecurityGrant) async throws {
        try await storage.rows(
            """
            INSERT INTO security_grants (container, environment, record_type, role, permissions)
            VALUES (\(container), \(environment.rawValue), \(grant.recordType), \(grant.role), \(Int32(grant.permissions.rawValue)))
            ON CONFLICT (container, environment, record_type, role) DO UPDATE SET permissions = excluded.permissions
            """)
    }

    func assignRole(container: String, environment: Environment, userID: Int64, role: String, assigned: Bool) async throws -> Bool {
        if assigned {
            return try await !storage.rows(
                """
                INSERT INTO role_assignments (container, environment, user_id, role)
                VALUES (\(container), \(environment.rawValue), \(userID), \(role))
                ON CONFLICT DO NOTHING RETURNING 1
                """
            ).isEmpty
        }
        return try await !storage.rows(
            """
            DELETE FROM role_assignments
            WHERE container = \(container) AND environment = \(environment.rawValue) AND user_id = \(userID) AND role = \(role)
            RETURNING 1
            """
        ).isEmpty
    }

    static let memberColumns = "m.container, m.user_id, m.record_name, m.discoverable, m.joined_at"

    private static func member(_ columns: (String, Int64, String, Bool?, Int64)) -> ContainerMember {
        ContainerMember(
            container: columns.0, userID: columns.1, userRecordName: columns.2, discoverable: columns.3, joinedAt: columns.4)
    }

    private static func profile(email: String?, phone: String?, names: String) -> UserProfile {
        UserProfile(emailAddress: email, phoneNumber: phone, nameComponents: NameComponents(storedText: names))
    }

    private static func directoryEntry(_ row: PostgresRow) throws -> DirectoryEntry {
        let (container, userID, recordName, discoverable, joinedAt, email, phone, names) = try row.decode(
            (String, Int64, String, Bool?, Int64, String?, String?, String).self)
        return DirectoryEntry(
            member: member((container, userID, recordName, discoverable, joinedAt)),
            profile: profile(email: email, phone: phone, names: names))
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

    func setUserDisabled(name: String, _ disabled: Bool) async throws -> Bool {
        let rows = try await storage.rows(
            """
            WITH changed AS (UPDATE users SET disabled = \(disabled) WHERE name = \(name) RETURNING id),
                 ended AS (DELETE FROM sessions WHERE \(disabled) AND user_id IN (SELECT id FROM changed) RETURNING 1)
            SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM ended)
            """)
        guard let (changed, _) = try rows.first?.decode((Int64, Int64).self) else { return false }
        return changed > 0
    }

    func deleteUser(id: Int64) async throws -> Bool {
        // Sessions, memberships, roles and linked identities go with the row (ON DELETE CASCADE).
        let rows = try await storage.rows(
            """
            WITH tokens AS (DELETE FROM push_tokens WHERE user_id = \(id) RETURNING 1),
                 badges AS (DELETE FROM badges WHERE user_id = \(id) RETURNING 1),
                 pending AS (DELETE FROM notifications WHERE user_id = \(id) RETURNING 1),
                 sealed AS (DELETE FROM sealed_keys WHERE user_id = \(id) RETURNING 1),
                 devices AS (DELETE FROM device_sync WHERE user_id = \(id) RETURNING 1),
                 removed AS (DELETE FROM users WHERE id = \(id) RETURNING 1)
            SELECT (SELECT count(*) FROM removed),
                   (SELECT count(*) FROM tokens) + (SELECT count(*) FROM badges) + (SELECT count(*) FROM pending) + (SELECT count(*) FROM sealed)
                   + (SELECT count(*) FROM devices)
            """)
        guard let (removed, _) = try rows.first?.decode((Int64, Int64).self) else { return false }
        return removed > 0
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

    private static let userColumns = "id, name, password_hash, created_at, disabled"

    private static func user(_ row: PostgresRow) throws -> UserRow {
        let (id, name, passwordHash, createdAt, disabled) = try row.decode((Int64, String, String, Int64, Bool).self)
        return UserRow(id: id, name: name, passwordHash: passwordHash, createdAt: createdAt, isDisabled: disabled)
    }
}
