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
            let keyID = Self.operatorKeyID(operatorName)
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

    /// The server-to-server identity an operator acts as in the public database: their edits
    /// are stamped with its record name.
    static func operatorKeyID(_ operatorName: String) -> String { "operator:\(operatorName)" }

    /// The record names operators' edits are stamped with, to the operators' names: the console
    /// says "operator olga" where a record shows that stamp (review defect 24).
    public func operatorStamps(container: String) async throws -> [String: String] {
        Dictionary(
            try await operators().map { (serverKeyRecordName(container: container, keyID: Self.operatorKeyID($0.name)), $0.name) },
            uniquingKeysWith: { first, _ in first })
    }

    /// Every member of the container, in the order they joined (paged through the store).
    func allMembers(container: String) async throws -> [NamedMember] {
        var members: [NamedMember] = []
        var after: Int64 = 0
        while true {
            let page = try await accounts.members(container: container, afterUserID: after, limit: 500)
            members += page
            guard let last = page.last else { return members }
            after = last.entry.member.userID
        }
    }

    /// One subscription of a container as the console lists it: whose, in which database.
    public struct ContainerSubscription: Sendable {
        public var userName: String
        public var scope: DatabaseScope
        public var subscription: SubscriptionInput
        public var createdAt: Int64
    }

    /// Every subscription of the container in one environment, every user's and database's
    /// (the dashboard's Subscriptions list), by user name, then database, then id. Read with
    /// one scan of the subscriptions table: an operator's page, not a request path.
    public func subscriptions(container: String, environment: Environment, as context: OperatorContext) async throws
        -> [ContainerSubscription]
    {
        try context.requireSight(of: container)
        try await requireContainer(container)
        let names = Dictionary(uniqueKeysWithValues: try await allMembers(container: container).map { ($0.entry.member.userID, $0.userName) })
        let rows = try await storage.readEveryPartition(.scan) { try $0.allSubscriptions() }.joined()
            .filter { $0.database.container == container && $0.database.environment == environment }
        return try rows.map {
            ContainerSubscription(
                userName: names[$0.userID] ?? "#\($0.userID)", scope: $0.database.scope, subscription: try Self.definition($0.definition),
                createdAt: $0.createdAt)
        }.sorted { ($0.userName, $0.scope.rawValue, $0.subscription.subscriptionID) < ($1.userName, $1.scope.rawValue, $1.subscription.subscriptionID) }
    }

    /// Deletes one user's subscription as the user would (`subscriptions/modify`), so the
    /// server stops matching it at once; audited.
    public func deleteSubscription(
        container: String, environment: Environment, scope: DatabaseScope, userName: String, subscriptionID: String,
        as context: OperatorContext
    ) async throws {
        try context.requireChange(container: container)
        // The subscriber as the caller (their private target names them), in the database watched.
        let caller = try await operatorTarget(
            container: container, environment: environment, scope: .private, userName: userName, operatorName: context.account.name,
            baseURL: nil
        ).caller
        let request = try SubscriptionsModifyRequest(
            json: ObjectReader(root: [
                WireKey.operations: [[WireKey.operationType: .string(SubscriptionOperationType.delete.rawValue), WireKey.subscription: [WireKey.subscriptionID: .string(subscriptionID)]]]
            ]))
        let answer = try await modifySubscriptions(DatabaseTarget(caller: caller, scope: scope), request)
        if case .failure(let error)? = answer.subscriptions.first { throw error }
        try await audit(
            context.account.name, "subscriptions.delete", container: container,
            "\(environment.rawValue) \(scope.rawValue) database subscription '\(subscriptionID)' of \(userName)")
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
