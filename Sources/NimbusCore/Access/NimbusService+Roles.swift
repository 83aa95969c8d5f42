import Foundation
import NimbusStorage
import NimbusWire

/// Security roles of the public database (docs/roles.md): who may create, read and write the
/// records of each type. Three roles are built in, as in CloudKit: `_world` (anyone with the
/// API token), `_icloud` (any signed-in user) and `_creator` (the record's creator); a
/// container environment adds its own and gives them to users. A record type whose security was
/// never set has CloudKit's defaults: the world reads, signed-in users create, creators write.
public enum SecurityRoles {
    public static let world = "_world"
    public static let icloud = "_icloud"
    public static let creator = "_creator"
    public static let builtIn: [String] = [world, icloud, creator]

    public static let defaults: [String: RecordPermissions] = [world: .read, icloud: .create, creator: .write]

    /// The grants of a record type: those set for it, else the defaults.
    static func grants(of recordType: String, in scope: SecurityScope) -> [String: RecordPermissions] {
        scope.grants[recordType] ?? defaults
    }

    /// What a caller may do with a record of `recordType`: the union of the grants of every
    /// role they hold. `creator` is the record's creator (nil for a record not made yet);
    /// `callerRecordName` is the caller's, `signedIn` whether they are a user.
    static func permissions(
        _ recordType: String, scope: SecurityScope, signedIn: Bool, userID: Int64?, callerRecordName: String?, creator: String?
    ) -> RecordPermissions {
        let grants = grants(of: recordType, in: scope)
        var held = grants[world] ?? []
        if signedIn { held.formUnion(grants[icloud] ?? []) }
        if let creator, creator == callerRecordName { held.formUnion(grants[SecurityRoles.creator] ?? []) }
        if let userID {
            for role in scope.assignments[userID] ?? [] { held.formUnion(grants[role] ?? []) }
        }
        return held
    }

    /// Each permission with its name in the schema language, in the order it writes them.
    public static let permissionNames: [(RecordPermissions, String)] = [(.create, "CREATE"), (.read, "READ"), (.write, "WRITE")]

    /// `CREATE, READ, WRITE`, as the schema language writes them.
    public static func names(_ permissions: RecordPermissions) -> String { nameList(permissions).joined(separator: ", ") }

    public static func nameList(_ permissions: RecordPermissions) -> [String] {
        permissionNames.filter { permissions.contains($0.0) }.map(\.1)
    }

    /// The permission a name (any case) stands for: CREATE, READ or WRITE.
    public static func permission(named name: String) -> RecordPermissions? {
        permissionNames.first { $0.1 == name.uppercased() }?.0
    }
}

/// What one caller may do in one container environment's public database, decided from the
/// security state read before the request's transaction.
struct PublicAccess: Sendable {
    let scope: SecurityScope
    let caller: Caller

    /// Users is every user's own type: world-readable, written by its user alone
    /// (`checkUserRecordWrite`), whatever grants say.
    static func isGoverned(_ recordType: String) -> Bool { recordType != Names.usersRecordType }

    func permissions(_ recordType: String, creator: String?) -> RecordPermissions {
        if caller.isAdministrator || !Self.isGoverned(recordType) { return .all }
        return SecurityRoles.permissions(
            recordType, scope: scope, signedIn: caller.user != nil, userID: caller.user?.id,
            callerRecordName: caller.user?.recordName, creator: creator)
    }

    /// Refuses an action the caller's roles do not grant, saying which grant it lacks.
    func require(_ permission: RecordPermissions, _ recordType: String, creator: String?, recordName: String? = nil)
        throws(CloudKitError)
    {
        guard !permissions(recordType, creator: creator).contains(permission) else { return }
        throw refusal(permission, recordType, recordName: recordName)
    }

    /// The `ACCESS_DENIED` of an action the caller's roles do not grant.
    func refusal(_ permission: RecordPermissions, _ recordType: String, recordName: String? = nil) -> CloudKitError {
        let verb = permission == .create ? "create" : permission == .read ? "read" : "change or delete"
        let holders = SecurityRoles.grants(of: recordType, in: scope).filter { $0.value.contains(permission) }.keys.sorted()
        return CloudKitError(
            .accessDenied,
            "you may not \(verb) records of type '\(recordType)'\(recordName.map { " ('\($0)')" } ?? ""): its security grants \(SecurityRoles.names(permission)) to \(holders.isEmpty ? "no role" : holders.joined(separator: ", ")) only",
            recordName: recordName)
    }

    /// How a query of `recordType` may read: every record, only the caller's own (the type
    /// grants READ to `_creator` alone among the caller's roles), or not at all.
    enum QueryReach { case all, ownRecords(String), denied }

    func queryReach(_ recordType: String) -> QueryReach {
        if permissions(recordType, creator: nil).contains(.read) { return .all }
        if let own = caller.user?.recordName, permissions(recordType, creator: own).contains(.read) { return .ownRecords(own) }
        return .denied
    }
}

extension NimbusService {
    func securityState() async throws -> SecurityState {
        let time = now
        if let state = securityCache.value(for: "", now: time) { return state }
        let state = try await accounts.securityState()
        securityCache.remember(state, for: "", now: time)
        return state
    }

    /// The caller's access to the public database, or nil for another database (where every
    /// record is the caller's own, or shared with them).
    func publicAccess(_ target: DatabaseTarget) async throws -> PublicAccess? {
        guard target.scope == .public else { return nil }
        let state = try await securityState()
        return PublicAccess(scope: state[target.caller.container, target.caller.environment], caller: target.caller)
    }

    /// Whether the subscriber of a public-database subscription may read the record a match
    /// is about: a notification never tells of a record its receiver may not read.
    func mayReceive(_ match: SubscriptionMatch, security: SecurityState) -> Bool {
        let subscription = match.subscription
        guard subscription.database.scope == .public, let record = match.record.flatMap({ $0.after ?? $0.before }),
            PublicAccess.isGoverned(record.recordType)
        else { return true }
        let database = subscription.database
        let receiver = keys.userRecordName(container: database.container, userID: subscription.key.userID)
        return SecurityRoles.permissions(
            record.recordType, scope: security[database.container, database.environment], signedIn: true,
            userID: subscription.key.userID, callerRecordName: receiver, creator: record.created.userRecordName
        ).contains(.read)
    }

    // MARK: Administration (CLI)

    /// The roles and the grants of every record type of the schema (defaults included).
    public func security(container: String, environment: Environment) async throws
        -> (roles: [String], grants: [String: [String: RecordPermissions]], assignments: [Int64: Set<String>])
    {
        let scope = try await accounts.securityState()[container, environment]
        var grants: [String: [String: RecordPermissions]] = [:]
        for recordType in try await schema(container: container, environment: environment).recordTypes {
            grants[recordType] = SecurityRoles.grants(of: recordType, in: scope)
        }
        for (recordType, granted) in scope.grants { grants[recordType] = granted }
        return (SecurityRoles.builtIn + scope.roles.sorted(), grants, scope.assignments)
    }

    /// Creates a custom role: an identifier, not starting with `_` (the built-in roles').
    public func createRole(container: String, environment: Environment, name: String) async throws {
        try Names.validateIdentifier(name, kind: "role name", path: "role")
        try await requireContainer(container)
        guard try await accounts.createRole(container: container, environment: environment, name: name, createdAt: now) else {
            throw CloudKitError(.exists, "role '\(name)' exists already in \(container)/\(environment.rawValue)")
        }
        securityCache.clear()
    }

    /// Adds (`granting`) or removes permissions of a role for a record type. The first change
    /// to a type's security starts from its defaults.
    public func changeGrant(
        container: String, environment: Environment, recordType: String, role: String, permissions: RecordPermissions,
        granting: Bool
    ) async throws {
        try Names.validateIdentifier(recordType, kind: "record type", path: "record type")
        // A grant on a type the schema lacks (a typo) would be kept and deployed, and shown
        // nowhere; the types every schema has are always there.
        let types = try await schema(container: container, environment: environment).recordTypes
        guard types.contains(recordType) || recordType == Names.usersRecordType || recordType == Names.shareRecordType else {
            throw CloudKitError(
                .notFound,
                "record type '\(Names.escaped(recordType))' is not in the \(environment.rawValue) schema of \(container); grant on one of its types (\(types.prefix(8).joined(separator: ", ")))")
        }
        let scope = try await accounts.securityState()[container, environment]
        guard SecurityRoles.builtIn.contains(role) || scope.roles.contains(role) else {
            throw CloudKitError(
                .notFound,
                "no role '\(Names.escaped(role))' in \(container)/\(environment.rawValue); create it first (the dashboard's Create role, or nimbus roles create)")
        }
        var grants = SecurityRoles.grants(of: recordType, in: scope)
        if scope.grants[recordType] == nil {
            for (defaultRole, defaults) in grants where defaultRole != role {
                try await accounts.setGrant(
                    container: container, environment: environment,
                    SecurityGrant(recordType: recordType, role: defaultRole, permissions: defaults))
            }
        }
        var held = grants[role] ?? []
        if granting { held.formUnion(permissions) } else { held.subtract(permissions) }
        grants[role] = held
        try await accounts.setGrant(
            container: container, environment: environment, SecurityGrant(recordType: recordType, role: role, permissions: held))
        securityCache.clear()
    }

    /// Gives a user a custom role, or takes it back.
    public func assignRole(container: String, environment: Environment, userName: String, role: String, assigned: Bool) async throws {
        if SecurityRoles.builtIn.contains(role) {
            throw CloudKitError.badRequest("'\(role)' is a built-in role: every user holds it as it applies; assign a custom role")
        }
        guard try await accounts.securityState()[container, environment].roles.contains(role) else {
            throw CloudKitError(.notFound, "no role '\(Names.escaped(role))' in \(container)/\(environment.rawValue)")
        }
        guard let user = try await accounts.user(name: userName) else {
            throw CloudKitError(.notFound, "user '\(Names.escaped(userName))' does not exist")
        }
        guard try await accounts.assignRole(container: container, environment: environment, userID: user.id, role: role, assigned: assigned)
        else {
            throw CloudKitError(.exists, "user '\(userName)' \(assigned ? "has" : "does not have") role '\(role)' already")
        }
        securityCache.clear()
    }

    /// Copies one environment's roles and grants to the other: development's to production in
    /// `deploySchema`, production's to development in `resetDevelopment`. Role assignments stay
    /// per environment. Returns how many roles were new.
    @discardableResult
    func copySecurity(container: String, from source: Environment, to target: Environment) async throws -> Int {
        let changes = try await securityDifference(container: container, from: source, to: target)
        var newRoles = 0
        for role in changes.newRoles {
            if try await accounts.createRole(container: container, environment: target, name: role, createdAt: now) { newRoles += 1 }
        }
        for grant in changes.changedGrants {
            try await accounts.setGrant(container: container, environment: target, grant)
        }
        securityCache.clear()
        return newRoles
    }

    /// The roles `source` has and `target` lacks, and the grants `target` must set to grant
    /// what `source` grants: what a copy writes, and what a deploy's diff shows. A record type's
    /// grants, once any is set, replace the defaults whole, so a type `target` never set gets
    /// every role's grant written.
    func securityDifference(container: String, from source: Environment, to target: Environment) async throws -> (
        newRoles: [String], changedGrants: [SecurityGrant]
    ) {
        let state = try await accounts.securityState()
        let from = state[container, source]
        let to = state[container, target]
        var changed: [SecurityGrant] = []
        for recordType in Set(from.grants.keys).union(to.grants.keys).sorted() {
            let wanted = SecurityRoles.grants(of: recordType, in: from)
            if let present = to.grants[recordType] {
                for role in Set(wanted.keys).union(present.keys).sorted() where (present[role] ?? []) != (wanted[role] ?? []) {
                    changed.append(SecurityGrant(recordType: recordType, role: role, permissions: wanted[role] ?? []))
                }
            } else if wanted != SecurityRoles.defaults {
                for (role, permissions) in wanted.sorted(by: { $0.key < $1.key }) {
                    changed.append(SecurityGrant(recordType: recordType, role: role, permissions: permissions))
                }
            }
        }
        return (from.roles.subtracting(to.roles).sorted(), changed)
    }
}
