/// Containers, API tokens, users and sessions: the first part of the storage protocol in its
/// async, coarse form (`docs/scale-out.md`). Each call is one unit of work, one short
/// transaction at most: one round trip on a networked engine, one hop (or none, for reads) on
/// the embedded one. Records, zones, schema, subscriptions and notifications go through units of
/// work instead (`ReadUnit`, `UnitOfWork`).
public protocol AccountStore: Sendable {
    func containers() async throws -> [ContainerRow]
    /// Returns false when a container with that id exists (nothing is written).
    func createContainer(_ row: ContainerRow) async throws -> Bool

    /// Returns false when the token's container does not exist (nothing is written).
    func createAPIToken(_ row: APITokenRow) async throws -> Bool
    /// Revokes the container's tokens (of one environment, or all); returns how many.
    func revokeAPITokens(container: String, environment: Environment?) async throws -> Int
    /// The container's tokens, revoked ones too, oldest first.
    func apiTokens(container: String) async throws -> [APITokenRow]
    /// Revokes the one live token of the container whose `APITokenRow.id` is `id`; false when
    /// there is none.
    func revokeAPIToken(container: String, id: String) async throws -> Bool
    /// Notes when a request last used a token (authentication calls it at most once a minute).
    func touchAPIToken(tokenHash: String, at time: Int64) async throws

    /// The API token and the session (with its user) these hashes name, read together: what
    /// authenticating one request needs, in one read.
    func credentials(apiTokenHash: String?, sessionHash: String?) async throws -> StoredCredentials

    func user(name: String) async throws -> UserRow?
    /// Accounts in the order they were made, after `afterID`, at most `limit`.
    func users(afterID: Int64, limit: Int) async throws -> [UserRow]
    /// Replaces an account's password hash and ends its sessions (a reset locks out whoever
    /// knew the old one); false when there is no such account.
    func setUserPassword(name: String, passwordHash: String) async throws -> Bool
    /// Creates an account unless its name, email address or phone number is taken (then
    /// nothing is written, and the answer says which).
    func createUser(name: String, passwordHash: String, createdAt: Int64, profile: UserProfile) async throws -> UserInsert
    /// The account's profile; nil when there is no such account.
    func profile(userID: Int64) async throws -> UserProfile?

    /// Notes that a user has used a container (idempotent: an existing member is kept as it is).
    func join(_ member: ContainerMember) async throws
    func member(container: String, userID: Int64) async throws -> ContainerMember?
    /// How many users have joined the container (the public database's quota grows with them).
    func memberCount(container: String) async throws -> Int64
    /// Sets a member's discoverability; false when the user is not a member of the container.
    func setDiscoverable(container: String, userID: Int64, _ discoverable: Bool) async throws -> Bool
    /// The container's members matching any of the lookups, with their profiles, whatever
    /// their discoverability (the caller decides what to reveal).
    func directory(container: String, lookups: [UserLookup]) async throws -> [DirectoryEntry]
    /// Members who made themselves discoverable, in the order they joined, at most `limit`.
    func discoverableMembers(container: String, limit: Int) async throws -> [DirectoryEntry]
    /// Every member of the container with their account name, by user id after `afterUserID`,
    /// at most `limit` (the dashboard's people list).
    func members(container: String, afterUserID: Int64, limit: Int) async throws -> [NamedMember]
    /// The container's settings (the defaults for a container never set).
    func containerSettings(container: String) async throws -> ContainerSettings
    /// Returns false when the container does not exist.
    func setContainerSettings(container: String, _ settings: ContainerSettings) async throws -> Bool

    /// Counts writes refused for what the schema lacked (`missing`: a type or `Type.field`, with
    /// how many refusals), noting `time` as the latest.
    func noteSchemaRefusals(container: String, environment: Environment, _ missing: [String: Int64], at time: Int64) async throws
    /// The refusals counted, of one container or (nil) every one, most recent first.
    func schemaRefusals(container: String?, environment: Environment) async throws -> [SchemaRefusalRow]

    /// OpenID Connect issuers per container; false when the container does not exist. A
    /// second put for the same issuer replaces the first.
    func putIdentityProvider(_ row: IdentityProviderRow) async throws -> Bool
    func identityProviders(container: String) async throws -> [IdentityProviderRow]
    func removeIdentityProvider(container: String, issuer: String) async throws -> Bool
    /// The account an issuer's subject signed in as before.
    func linkedUser(issuer: String, subject: String) async throws -> UserRow?
    /// Links an issuer's subject to an account; false when it is linked already.
    func link(issuer: String, subject: String, userID: Int64) async throws -> Bool

    /// Security roles for the public database (docs/roles.md): read whole, and cached by the
    /// service.
    func securityState() async throws -> SecurityState
    /// Returns false when a role of that name exists (nothing is written).
    func createRole(container: String, environment: Environment, name: String, createdAt: Int64) async throws -> Bool
    /// Sets what `grant.role` may do with `grant.recordType` (replacing what it had).
    func setGrant(container: String, environment: Environment, _ grant: SecurityGrant) async throws
    /// Gives a user a custom role, or takes it back; false when nothing changed.
    func assignRole(container: String, environment: Environment, userID: Int64, role: String, assigned: Bool) async throws -> Bool

    /// Stores a new session and removes sessions last used before `idleBefore`.
    func startSession(_ row: SessionRow, removingSessionsIdleBefore idleBefore: Int64) async throws
    func touchSession(tokenHash: String, at time: Int64) async throws
    func endSession(tokenHash: String) async throws
    /// The user's sessions, in every container, newest first.
    func sessions(userID: Int64) async throws -> [SessionRow]
    /// Ends every session of the user; nil when there is no such user, else how many ended.
    func endSessions(userName: String) async throws -> Int?
    /// Disables an account (ending its sessions) or enables it; false when there is no such account.
    func setUserDisabled(name: String, _ disabled: Bool) async throws -> Bool
    /// Removes an account and what hangs off it alone: sessions, memberships, roles, linked
    /// identities, push tokens, badges and pending notifications. Its databases are emptied
    /// first by the service (`NimbusService.deleteUser`). False when there is no such account.
    func deleteUser(id: Int64) async throws -> Bool

    func addServerKey(_ row: ServerKeyRow) async throws -> ServerKeyInsert
    func serverKey(id: String) async throws -> ServerKeyRow?
    func serverKeys(container: String) async throws -> [ServerKeyRow]
    /// Returns false when there is no such key or it was revoked already.
    func revokeServerKey(id: String) async throws -> Bool
    /// Notes a signature as used until `keepUntil` and forgets those kept until before `now`;
    /// false when it was noted already (a replay). One statement on a networked engine, so
    /// every node sees every other node's signatures.
    func admitSignature(_ signatureHash: String, keepUntil: Int64, now: Int64) async throws -> Bool
}

/// What `AccountStore.credentials` found.
public struct StoredCredentials: Sendable {
    public var apiToken: APITokenRow?
    /// The session and its user, when both exist.
    public var session: (row: SessionRow, user: UserRow)?

    public init(apiToken: APITokenRow? = nil, session: (row: SessionRow, user: UserRow)? = nil) {
        self.apiToken = apiToken
        self.session = session
    }
}
