/// Containers, API tokens, users and sessions: the first part of the storage protocol in its
/// async, coarse form (`docs/scale-out.md`). Each call is one unit of work, one short
/// transaction at most: one round trip on a networked engine, one hop (or none, for reads) on
/// the embedded one. The rest of the protocol (`StorageReader`, `StorageWriter`) moves to this
/// form one aggregate at a time.
public protocol AccountStore: Sendable {
    func containers() async throws -> [ContainerRow]
    /// Returns false when a container with that id exists (nothing is written).
    func createContainer(_ row: ContainerRow) async throws -> Bool

    /// Returns false when the token's container does not exist (nothing is written).
    func createAPIToken(_ row: APITokenRow) async throws -> Bool
    /// Revokes the container's tokens (of one environment, or all); returns how many.
    func revokeAPITokens(container: String, environment: Environment?) async throws -> Int

    /// The API token and the session (with its user) these hashes name, read together: what
    /// authenticating one request needs, in one read.
    func credentials(apiTokenHash: String?, sessionHash: String?) async throws -> StoredCredentials

    func user(name: String) async throws -> UserRow?
    /// Returns nil when a user with that name exists (nothing is written).
    func createUser(name: String, passwordHash: String, createdAt: Int64) async throws -> UserRow?

    /// Stores a new session and removes sessions last used before `idleBefore`.
    func startSession(_ row: SessionRow, removingSessionsIdleBefore idleBefore: Int64) async throws
    func touchSession(tokenHash: String, at time: Int64) async throws
    func endSession(tokenHash: String) async throws
    /// Ends every session of the user; nil when there is no such user, else how many ended.
    func endSessions(userName: String) async throws -> Int?

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
