import NimbusStorage
import NimbusWire

/// What the dashboard's operators do to an app's data and people (docs/dashboard.md). Data
/// goes through the same service calls an app's requests do, with a caller made for the
/// operator: on the public database the operator acts as its administrator (as a
/// server-to-server key does); on a user's private or shared database, as that user. Reading a
/// user's databases and every change are written to the audit log by the admin API.
extension NimbusService {
    /// The most people one page of `members` lists.
    public static let consolePageLimit = 200

    /// The database an operator's data call acts on. `changing`: the call writes (a read-only
    /// operator is refused before anything happens).
    public func consoleTarget(
        container: String, environment: Environment, scope: DatabaseScope, userName: String?, as context: OperatorContext,
        changing: Bool, baseURL: String?
    ) async throws -> DatabaseTarget {
        if changing { try context.requireChange(container: container) } else { try context.requireSight(of: container) }
        return try await operatorTarget(
            container: container, environment: environment, scope: scope, userName: userName, operatorName: context.account.name,
            baseURL: baseURL)
    }

    /// The database an operator acts on, once their right to is settled (the admin API checks
    /// their roles; the admin verbs run by whoever may open the store).
    func operatorTarget(
        container: String, environment: Environment, scope: DatabaseScope, userName: String?, operatorName: String, baseURL: String?
    ) async throws -> DatabaseTarget {
        try await requireContainer(container)
        let caller: Caller
        switch scope {
        case .public:
            guard userName == nil else {
                throw CloudKitError.badRequest("user: the public database belongs to no user; leave the user out")
            }
            let keyID = "operator:\(operatorName)"
            caller = Caller(
                container: container, environment: environment, user: nil, deviceID: "dashboard",
                serverKey: Caller.ServerKey(keyID: keyID, recordName: serverKeyRecordName(container: container, keyID: keyID)))
        case .private, .shared:
            guard let userName, !userName.isEmpty else {
                throw CloudKitError.badRequest("user: name the user whose \(scope.rawValue) database to open")
            }
            let user = try await person(userName)
            caller = Caller(
                container: container, environment: environment,
                user: Caller.User(
                    id: user.id, name: user.name, recordName: userRecordName(container: container, userID: user.id), webAuthToken: ""),
                deviceID: "dashboard")
        }
        var target = DatabaseTarget(caller: caller, scope: scope, assetBaseURL: baseURL)
        target.operatorScan = true
        return target
    }

    /// The container's members with their account names, a page at a time (by user id).
    public func members(container: String, after userID: Int64, limit: Int, as context: OperatorContext) async throws -> [NamedMember] {
        try context.requireSight(of: container)
        return try await accounts.members(container: container, afterUserID: userID, limit: min(max(limit, 1), Self.consolePageLimit))
    }

    /// One person as the dashboard shows them: membership, sessions in the container, the
    /// custom roles they hold in each environment, and their push tokens.
    public struct PersonDetail: Sendable {
        public var user: UserRow
        public var member: ContainerMember?
        public var sessions: [SessionRow]
        public var roles: [Environment: [String]]
        public var pushTokens: [PushTokenRow]
    }

    public func personDetail(container: String, userName: String, as context: OperatorContext) async throws -> PersonDetail {
        try context.requireSight(of: container)
        let user = try await person(userName)
        let state = try await accounts.securityState()
        var roles: [Environment: [String]] = [:]
        var tokens: [PushTokenRow] = []
        for environment in [Environment.development, .production] {
            roles[environment] = (state[container, environment].assignments[user.id] ?? []).sorted()
            tokens += try await pushTokens(of: NotificationOwner(container: container, environment: environment, userID: user.id))
        }
        return PersonDetail(
            user: user, member: try await accounts.member(container: container, userID: user.id),
            sessions: try await accounts.sessions(userID: user.id).filter { $0.container == container }, roles: roles,
            pushTokens: tokens)
    }

    /// Ends one of a user's sessions in the container (`sessionID`: the session's token hash,
    /// as `personDetail` lists it); the app's next request with it answers
    /// AUTHENTICATION_REQUIRED.
    public func revokeSession(container: String, userName: String, sessionID: String, as context: OperatorContext) async throws {
        try context.requireChange(container: container)
        let user = try await person(userName)
        guard try await accounts.sessions(userID: user.id).contains(where: { $0.tokenHash == sessionID && $0.container == container })
        else {
            throw CloudKitError(.notFound, "user '\(Names.escaped(userName))' has no such session in container '\(Names.escaped(container))'")
        }
        try await accounts.endSession(tokenHash: sessionID)
        credentialCache.clear()
        try await audit(context.account.name, "sessions.revoke", container: container, "a session of user \(userName)")
    }

    /// An account by name, or NOT_FOUND naming it.
    func person(_ userName: String) async throws -> UserRow {
        guard let user = try await accounts.user(name: userName) else {
            throw CloudKitError(.notFound, "there is no user '\(Names.escaped(userName))'")
        }
        return user
    }
}
