import Foundation
import NimbusStorage
import NimbusWire

/// Containers, API tokens, users, sessions: who may call, and as whom.
extension NimbusService {
    /// Container ids: `iCloud.com.example.App` style — letters, digits, `.`, `-`, `_`.
    public static func validateContainerID(_ id: String) throws(CloudKitError) {
        let bytes = Array(id.utf8)
        guard !bytes.isEmpty, bytes.count <= Limits.nameBytes.value,
            bytes.allSatisfy({ isIdentifierByte($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") })
        else {
            throw .badRequest(
                "'\(Names.escaped(id))' is not a valid container id; use letters, digits, '.', '-' and '_' (e.g. iCloud.com.example.App)")
        }
    }

    /// User names: 1–64 of letters, digits, `.`, `-`, `_`, `@`.
    public static func validateUserName(_ name: String) throws(CloudKitError) {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 64,
            bytes.allSatisfy({
                isIdentifierByte($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "@")
            })
        else {
            throw .badRequest(
                "'\(Names.escaped(name))' is not a valid user name; use 1 to 64 letters, digits, '.', '-', '_' or '@'")
        }
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
    }

    // MARK: Administration (CLI)

    /// Creates a container; `EXISTS` if it is there already.
    public func createContainer(id: String) async throws {
        try Self.validateContainerID(id)
        let createdAt = now
        guard try await accounts.createContainer(ContainerRow(id: id, createdAt: createdAt)) else {
            throw CloudKitError(.exists, "container '\(id)' already exists")
        }
    }

    public func containers() async throws -> [ContainerRow] {
        try await accounts.containers()
    }

    /// NOT_FOUND naming the container, unless it exists.
    func requireContainer(_ id: String) async throws {
        try await storage.read { tx in try Self.requireContainer(id, tx: tx) }
    }

    /// The same inside a transaction, for a change that must not start on a missing container.
    static func requireContainer(_ id: String, tx: ReadUnit) throws {
        guard try tx.container(id: id) != nil else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(id))' does not exist")
        }
    }

    /// Whether an API token still opens its container (exists and is not revoked): the
    /// banner of `nimbus serve` never prints a dead one.
    public func apiTokenIsLive(_ token: String) async throws -> Bool {
        guard let row = try await accounts.credentials(apiTokenHash: Credentials.tokenHash(token), sessionHash: nil).apiToken else {
            return false
        }
        return !row.isRevoked
    }

    /// Makes a new API token for the container and environment and returns it; only its hash is kept.
    /// `allowedOrigins` are the web origins whose pages may use it (`["*"]`: any), each
    /// `scheme://host[:port]`. `signInCallback` is where the sign-in page sends the browser
    /// after signing in (CloudKit's "Sign In Callback"): an absolute http or https URL.
    /// `name` says what the token is for, so a list of tokens can be read and one revoked.
    public func createAPIToken(
        container: String, environment: Environment, allowedOrigins: [String] = ["*"], signInCallback: String? = nil,
        name: String? = nil
    ) async throws -> String {
        let name = try name.flatMap(Self.tokenName)
        let origins = try allowedOrigins.map(Self.normalizedOrigin)
        guard !origins.isEmpty else { throw CloudKitError.badRequest("name at least one allowed origin, or * for any") }
        if let signInCallback {
            guard let url = URL(string: signInCallback), ["http", "https"].contains(url.scheme?.lowercased() ?? ""),
                url.host?.isEmpty == false, url.fragment == nil
            else {
                throw CloudKitError.badRequest(
                    "'\(Names.escaped(signInCallback))' is not a sign-in callback; give an absolute http(s) URL without a #fragment, like https://app.example.com/signed-in")
            }
        }
        let token = Credentials.newAPIToken()
        let row = APITokenRow(
            tokenHash: Credentials.tokenHash(token), container: container, environment: environment, createdAt: now,
            isRevoked: false, allowedOrigins: origins, signInCallback: signInCallback, name: name)
        guard try await accounts.createAPIToken(row) else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' does not exist; create it with `nimbus containers create`")
        }
        return token
    }

    /// A token's name, trimmed: at most 64 characters, none of them control characters; an
    /// empty name is no name.
    static func tokenName(_ text: String) throws(CloudKitError) -> String? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return nil }
        guard trimmed.count <= 64, !trimmed.unicodeScalars.contains(where: { CharacterSet.controlCharacters.contains($0) }) else {
            throw CloudKitError.badRequest(
                "a token's name is at most 64 characters without line breaks or control characters, like 'iOS app' (this one: \(trimmed.count) characters)")
        }
        return trimmed
    }

    /// The container's API tokens, revoked ones too, oldest first (never the tokens themselves:
    /// only their hashes are kept).
    public func apiTokens(container: String) async throws -> [APITokenRow] {
        try await requireContainer(container)
        return try await accounts.apiTokens(container: container)
    }

    /// Revokes one token by its id (`APITokenRow.id`, as `apiTokens` lists it).
    public func revokeAPIToken(container: String, id: String) async throws -> APITokenRow {
        let tokens = try await apiTokens(container: container)
        guard let token = tokens.first(where: { $0.id == id.lowercased() && !$0.isRevoked }),
            try await accounts.revokeAPIToken(container: container, id: token.id)
        else {
            throw CloudKitError(
                .notFound,
                "container '\(Names.escaped(container))' has no live API token '\(Names.escaped(id))'; nimbus tokens list shows their ids")
        }
        credentialCache.clear()
        return token
    }

    /// An origin as browsers send it: `scheme://host[:port]`, lowercased, no path.
    static func normalizedOrigin(_ text: String) throws(CloudKitError) -> String {
        if text == "*" { return text }
        let lowered = text.lowercased()
        guard let url = URL(string: lowered), let scheme = url.scheme, ["http", "https"].contains(scheme),
            let host = url.host, !host.isEmpty, url.path.isEmpty || url.path == "/", url.query == nil, url.user == nil
        else {
            throw CloudKitError.badRequest(
                "'\(Names.escaped(text))' is not a web origin; write it as scheme://host[:port], like https://app.example.com, or * for any")
        }
        return url.port.map { "\(scheme)://\(host):\($0)" } ?? "\(scheme)://\(host)"
    }

    /// An API token's row (CORS reads its allowed origins), or nil for a token that is unknown
    /// or revoked; from the credential cache authentication fills, so a known token costs no
    /// storage read per request.
    public func apiTokenRow(_ apiToken: String) async throws -> APITokenRow? {
        let hash = Credentials.tokenHash(apiToken)
        let time = now
        if let cached = credentialCache.tokens.value(for: hash, now: time) { return cached.isRevoked ? nil : cached }
        guard let row = try await accounts.credentials(apiTokenHash: hash, sessionHash: nil).apiToken else { return nil }
        credentialCache.tokens.remember(row, for: hash, now: time)
        return row.isRevoked ? nil : row
    }

    public func revokeAPITokens(container: String, environment: Environment?) async throws -> Int {
        defer { credentialCache.clear() }
        return try await accounts.revokeAPITokens(container: container, environment: environment)
    }

    /// Creates an account; `profile` makes it a person others can find (docs/identities.md):
    /// its email address and phone number are normalized and must be unused.
    public func createUser(name: String, password: String, profile: UserProfile = UserProfile()) async throws -> UserRow {
        try Self.validateUserName(name)
        try Self.validateUserPassword(password)
        let profile = try Self.normalized(profile)
        let rounds = options.passwordRounds
        let hash = try await options.passwordHashing.run { Result { try Credentials.hashPassword(password, rounds: rounds) } }.get()
        switch try await accounts.createUser(name: name, passwordHash: hash, createdAt: now, profile: profile) {
        case .created(let user): return user
        case .nameTaken: throw CloudKitError(.exists, "user '\(name)' already exists")
        case .emailTaken:
            throw CloudKitError(.exists, "another account has the email address \(profile.emailAddress ?? "")")
        case .phoneTaken:
            throw CloudKitError(.exists, "another account has the phone number \(profile.phoneNumber ?? "")")
        }
    }

    /// Signs the user out everywhere; returns how many sessions ended.
    public func revokeSessions(userName: String) async throws -> Int {
        defer { credentialCache.clear() }
        guard let ended = try await accounts.endSessions(userName: userName) else {
            throw CloudKitError(.notFound, "user '\(Names.escaped(userName))' does not exist")
        }
        return ended
    }

    public func userRecordName(container: String, userID: Int64) -> String {
        keys.userRecordName(container: container, userID: userID)
    }

    // MARK: Requests

    /// Checks the API token (and the web auth token, when sent) of a request.
    ///
    /// - A missing, unknown, revoked or mismatched API token: `AUTHENTICATION_FAILED` (401).
    /// - A web auth token that is unknown, expired, revoked or for another container:
    ///   `AUTHENTICATION_REQUIRED` (421), so the client signs in again.
    public func authenticate(
        container: String, environment: Environment, apiToken: String?, webAuthToken: String?, deviceID: String
    ) async throws -> Caller {
        let apiHash = apiToken.map(Credentials.tokenHash)
        let sessionHash = webAuthToken.map(Credentials.tokenHash)
        let time = now
        var token = apiHash.flatMap { credentialCache.tokens.value(for: $0, now: time) }
        var cachedSession = sessionHash.flatMap { credentialCache.sessions.value(for: $0, now: time) }
        if (apiHash != nil && token == nil) || (sessionHash != nil && cachedSession == nil) {
            let stored = try await accounts.credentials(apiTokenHash: apiHash, sessionHash: sessionHash)
            let readToken = stored.apiToken
            let readSession = stored.session.map {
                CredentialCache.Session(
                    row: $0.row, user: $0.user, userRecordName: keys.userRecordName(container: $0.row.container, userID: $0.user.id))
            }
            token = readToken
            cachedSession = readSession
            if let readToken { credentialCache.tokens.remember(readToken, for: readToken.tokenHash, now: time) }
            if let readSession { credentialCache.sessions.remember(readSession, for: readSession.row.tokenHash, now: time) }
        }
        let session = cachedSession?.row
        let user = cachedSession?.user
        let recordName = cachedSession?.userRecordName
        guard let apiToken, !apiToken.isEmpty else {
            throw CloudKitError(.authenticationFailed, "missing ckAPIToken; every request needs the container's API token")
        }
        guard let token, !token.isRevoked else {
            throw CloudKitError(.authenticationFailed, "the API token is not valid (unknown or revoked)")
        }
        guard token.container == container, token.environment == environment else {
            throw CloudKitError(
                .authenticationFailed,
                "the API token is for \(token.container)/\(token.environment.rawValue), not \(Names.escaped(container))/\(environment.rawValue)")
        }
        // Its last use, to the minute (the operator's token list shows it), as for sessions below.
        if time - (token.lastUsedAt ?? 0) > 60_000 {
            try await accounts.touchAPIToken(tokenHash: token.tokenHash, at: time)
            var touched = token
            touched.lastUsedAt = time
            credentialCache.tokens.remember(touched, for: touched.tokenHash, now: time)
        }
        guard let webAuthToken else {
            return Caller(container: container, environment: environment, user: nil, deviceID: deviceID, apiTokenID: token.id)
        }
        guard let session, let user, let recordName, session.container == container, session.environment == environment else {
            throw CloudKitError(.authenticationRequired, "the web auth token is not valid (unknown, revoked or for another container); sign in again")
        }
        guard time - session.lastUsedAt <= options.sessionIdleTimeoutMilliseconds else {
            throw CloudKitError(.authenticationRequired, "the session expired after being idle; sign in again")
        }
        // Refresh the idle clock at most once a minute: a write per request would cost more than it tells.
        if time - session.lastUsedAt > 60_000 {
            try await accounts.touchSession(tokenHash: session.tokenHash, at: time)
            var touched = session
            touched.lastUsedAt = time
            credentialCache.sessions.remember(
                CredentialCache.Session(row: touched, user: user, userRecordName: recordName), for: touched.tokenHash, now: time)
        }
        return Caller(
            container: container, environment: environment,
            user: Caller.User(id: user.id, name: user.name, recordName: recordName, webAuthToken: webAuthToken),
            deviceID: deviceID, apiTokenID: token.id)
    }

    /// Signs a user in; returns the new web auth token and the user's record name. Attempts
    /// are counted per client address and wrong passwords per account (`SignInLimits`); the
    /// password is checked on the hashing threads (`PasswordHashing`).
    ///
    /// `sessionToken`: a web auth token the request carries besides (`ckWebAuthToken`); when it
    /// is a live session of this account, the request is its known device and strangers'
    /// wrong guesses do not hold it back.
    public func signIn(
        container: String, environment: Environment, apiToken: String?, userName: String, password: String,
        clientAddress: String? = nil, sessionToken: String? = nil
    ) async throws -> (webAuthToken: String, userRecordName: String) {
        _ = try await authenticate(
            container: container, environment: environment, apiToken: apiToken, webAuthToken: nil, deviceID: "")
        var hasSession = false
        if let sessionToken, !sessionToken.isEmpty,
            let session = try? await authenticate(
                container: container, environment: environment, apiToken: apiToken, webAuthToken: sessionToken, deviceID: "")
        {
            hasSession = session.user?.name.lowercased() == userName.lowercased()
        }
        let admission = try signInThrottle.admit(address: clientAddress, account: userName, hasSession: hasSession, now: now)
        let user = try await accounts.user(name: userName)
        // Hash even for an unknown user, so timing does not tell which names exist.
        let stored = user?.passwordHash ?? "pbkdf2-sha256$\(options.passwordRounds)$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        let matches = try await options.passwordHashing.run { Credentials.verifyPassword(password, against: stored) }
        guard let user, matches else {
            let pause = signInThrottle.failed(admission, now: now)
            if pause > .zero { try await Task.sleep(for: pause) }
            throw CloudKitError(.authenticationFailed, "unknown user name or wrong password")
        }
        let session = try await startSession(container: container, environment: environment, user: user, at: now)
        signInThrottle.succeeded(admission, now: now)
        return session
    }

    /// A new session for a user whose credentials were checked (a password, an id token); the
    /// user joins the container on the way (their user record is made at the first sign-in).
    func startSession(container: String, environment: Environment, user: UserRow, at time: Int64) async throws
        -> (webAuthToken: String, userRecordName: String)
    {
        // Said only after the credentials were right, so it tells nothing to someone guessing.
        guard !user.isDisabled else {
            throw CloudKitError(.authenticationFailed, "this account is disabled; the app's operator can enable it again")
        }
        let token = Credentials.newWebAuthToken()
        let row = SessionRow(
            tokenHash: Credentials.tokenHash(token), userID: user.id, container: container, environment: environment,
            createdAt: time, lastUsedAt: time)
        let idleLimit = options.sessionIdleTimeoutMilliseconds
        // Sweep sessions idle past the limit, so the table does not grow forever.
        try await accounts.startSession(row, removingSessionsIdleBefore: time - idleLimit)
        let recordName = keys.userRecordName(container: container, userID: user.id)
        try await joinContainer(container: container, environment: environment, user: user, recordName: recordName, at: time)
        return (token, recordName)
    }

    /// Self-service sign-up (docs/identities.md): makes the account and signs it in, where the
    /// container allows it (`nimbus containers sign-up C on`). Attempts count against the
    /// client address's sign-in allowance, so accounts cannot be made in bulk.
    public func signUp(
        container: String, environment: Environment, apiToken: String?, _ request: SignUpRequest, clientAddress: String? = nil
    ) async throws -> (webAuthToken: String, userRecordName: String) {
        _ = try await authenticate(
            container: container, environment: environment, apiToken: apiToken, webAuthToken: nil, deviceID: "")
        guard try await accounts.containerSettings(container: container).signUp else {
            throw CloudKitError(
                .accessDenied, "this container does not let people sign up; its operator makes accounts (nimbus users create)")
        }
        _ = try signInThrottle.admit(address: clientAddress, account: request.username, now: now)
        _ = try await createUser(
            name: request.username, password: request.password,
            profile: UserProfile(emailAddress: request.emailAddress, phoneNumber: request.phoneNumber, nameComponents: request.nameComponents))
        return try await signIn(
            container: container, environment: environment, apiToken: apiToken, userName: request.username,
            password: request.password, clientAddress: clientAddress)
    }

    /// Ends the session of this web auth token.
    public func signOut(webAuthToken: String) async throws {
        let hash = Credentials.tokenHash(webAuthToken)
        defer { credentialCache.clear() }
        try await accounts.endSession(tokenHash: hash)
    }
}

extension NimbusService {
    /// What a user's password must be.
    static func validateUserPassword(_ password: String) throws(CloudKitError) {
        guard password.utf8.count >= 8, password.utf8.count <= 1024 else {
            throw .badRequest("the password must be 8 to 1024 bytes long")
        }
    }

    /// Sets a user's password and ends their sessions on every device (`nimbus users passwd`).
    public func setUserPassword(name: String, password: String) async throws {
        try Self.validateUserPassword(password)
        let rounds = options.passwordRounds
        let hash = try await options.passwordHashing.run { Result { try Credentials.hashPassword(password, rounds: rounds) } }.get()
        guard try await accounts.setUserPassword(name: name, passwordHash: hash) else {
            throw CloudKitError(.notFound, "there is no user '\(Names.escaped(name))'")
        }
        credentialCache.clear()
    }

    /// Accounts in the order they were made, a page at a time (`nimbus users list`), each with
    /// its profile.
    public func users(afterID: Int64 = 0, limit: Int = 1_000) async throws -> [(UserRow, UserProfile)] {
        var listed: [(UserRow, UserProfile)] = []
        for user in try await accounts.users(afterID: afterID, limit: limit) {
            listed.append((user, try await accounts.profile(userID: user.id) ?? UserProfile()))
        }
        return listed
    }
}
