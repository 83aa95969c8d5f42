import NimbusWire

/// The two data sets of every container (CloudKit's development and production environments).
public enum Environment: String, Sendable, Hashable, CaseIterable {
    case development
    case production
}

/// Which of a container's databases.
public enum DatabaseScope: String, Sendable, Hashable, CaseIterable {
    case `public`
    case `private`
    case shared
}

/// A logical database: the public database of a container and environment, or one user's
/// private or shared database there. Every stored row is keyed by one.
public struct DatabaseKey: Sendable, Hashable, CustomStringConvertible {
    public var container: String
    public var environment: Environment
    public var scope: DatabaseScope
    /// The owning user's id; 0 for the public database.
    public var ownerID: Int64

    public init(container: String, environment: Environment, scope: DatabaseScope, ownerID: Int64) {
        self.container = container
        self.environment = environment
        self.scope = scope
        self.ownerID = scope == .public ? 0 : ownerID
    }

    public var description: String { "\(container)/\(environment.rawValue)/\(scope.rawValue)#\(ownerID)" }
}

public struct DatabaseRow: Sendable, Hashable {
    public var id: Int64
    public var key: DatabaseKey
    /// The last change sequence handed out in this database.
    public var sequence: Int64
    /// The bytes its live records take (`RecordRow.storedBytes`), kept with every write: what
    /// quotas count (docs/limits.md).
    public var usedBytes: Int64
    /// Whether it is being moved to another partition, or was (nil: it lives here).
    public var relocation: DatabaseRelocation?

    public init(id: Int64, key: DatabaseKey, sequence: Int64, usedBytes: Int64 = 0, relocation: DatabaseRelocation? = nil) {
        self.id = id
        self.key = key
        self.sequence = sequence
        self.usedBytes = usedBytes
        self.relocation = relocation
    }
}

/// A logical database's move between partitions as its row on the source store tells it
/// (`nimbus partitions move`, docs/scale-out.md "Moving a user").
public enum DatabaseRelocation: Sendable, Hashable {
    /// Being copied to the partition: reads go on here, writes are refused (`StorageError.moving`)
    /// until the placement switches, so the copy misses none.
    case fenced(to: String)
    /// Lives on the partition now: the row stays here as a pointer that refuses reads and writes
    /// alike, so a node whose placement is stale learns of the move instead of reading nothing.
    case moved(to: String)
}

/// A zone. Deleting a zone keeps its row as a tombstone (for database change feeds) until a
/// zone of the same name is created again, which gets a new `id`: tokens of the old zone
/// then no longer match and are reported as expired.
public struct ZoneRow: Sendable, Hashable {
    public var id: Int64
    public var databaseID: Int64
    public var name: String
    /// The database's sequence at the last change to the zone or any record in it: what the
    /// database's change feed orders zones by. The driver stamps it as the write commits, so
    /// writers of different zones never decide it (and never collide over it).
    public var changeSequence: Int64
    /// The sequence of the zone's last record change: record changes in the zone take
    /// strictly greater values, so it is the zone's change feed position. Ordered per zone,
    /// not per database (CloudKit's change tokens are per zone).
    public var recordSequence: Int64
    public var isDeleted: Bool

    public init(id: Int64, databaseID: Int64, name: String, changeSequence: Int64, recordSequence: Int64, isDeleted: Bool) {
        self.id = id
        self.databaseID = databaseID
        self.name = name
        self.changeSequence = changeSequence
        self.recordSequence = recordSequence
        self.isDeleted = isDeleted
    }
}

/// Who changed a record, when, from which device (the `created` / `modified` dictionaries).
public struct ChangeStamp: Sendable, Hashable {
    /// Milliseconds since 1970.
    public var timestamp: Int64
    public var userRecordName: String
    public var deviceID: String

    public init(timestamp: Int64, userRecordName: String, deviceID: String) {
        self.timestamp = timestamp
        self.userRecordName = userRecordName
        self.deviceID = deviceID
    }
}

/// A record as stored. `fields` is the core's encoding (JSON text of the field
/// dictionaries); drivers store it without looking inside. A deleted record stays as a
/// tombstone row so change feeds can report the deletion.
public struct RecordRow: Sendable, Hashable {
    public var zoneID: Int64
    public var recordName: String
    public var recordType: String
    public var fields: [UInt8]
    public var parent: String?
    /// The sequence of the record's last change (`UnitOfWork.nextRecordSequence`, ordered
    /// within its zone); also the record's change tag.
    public var changeSequence: Int64
    public var created: ChangeStamp
    public var modified: ChangeStamp
    public var isDeleted: Bool

    public init(
        zoneID: Int64, recordName: String, recordType: String, fields: [UInt8], parent: String?,
        changeSequence: Int64, created: ChangeStamp, modified: ChangeStamp, isDeleted: Bool
    ) {
        self.zoneID = zoneID
        self.recordName = recordName
        self.recordType = recordType
        self.fields = fields
        self.parent = parent
        self.changeSequence = changeSequence
        self.created = created
        self.modified = modified
        self.isDeleted = isDeleted
    }

    /// What the record counts against its database's quota: its name, type and stored fields
    /// in bytes; nothing once deleted. The same sum in SQL frees a deleted zone's records
    /// (`UnitOfWork.deleteZone`), so the two must agree.
    public var storedBytes: Int64 {
        isDeleted ? 0 : Int64(recordName.utf8.count + recordType.utf8.count + fields.count)
    }
}

public struct ContainerRow: Sendable, Hashable {
    public var id: String
    public var createdAt: Int64

    public init(id: String, createdAt: Int64) {
        self.id = id
        self.createdAt = createdAt
    }
}

/// An API token. Only its SHA-256 is stored.
public struct APITokenRow: Sendable, Hashable {
    public var tokenHash: String
    public var container: String
    public var environment: Environment
    public var createdAt: Int64
    public var isRevoked: Bool
    /// Web origins (`https://app.example`) whose pages may use the token; `["*"]` allows any
    /// (CloudKit's API token setting). Requests without an `Origin` header are not affected.
    public var allowedOrigins: [String]
    /// Where the sign-in page sends the browser after signing in, with `ckWebAuthToken`
    /// (CloudKit's "Sign In Callback"); nil: the page hands the token to its opener.
    public var signInCallback: String?
    /// What the token is for, in the operator's words ("iOS app", "staging site"); nil for
    /// tokens made without one.
    public var name: String?
    /// When a request last used the token, to the minute (nil: never).
    public var lastUsedAt: Int64?

    public init(
        tokenHash: String, container: String, environment: Environment, createdAt: Int64, isRevoked: Bool,
        allowedOrigins: [String] = ["*"], signInCallback: String? = nil, name: String? = nil, lastUsedAt: Int64? = nil
    ) {
        self.tokenHash = tokenHash
        self.container = container
        self.environment = environment
        self.createdAt = createdAt
        self.isRevoked = isRevoked
        self.allowedOrigins = allowedOrigins
        self.signInCallback = signInCallback
        self.name = name
        self.lastUsedAt = lastUsedAt
    }

    /// The token's public identifier, shown in lists and used to revoke it alone: the first
    /// 16 hex digits of its hash. The token itself is never kept, so it cannot be shown again.
    public var id: String { String(tokenHash.prefix(Self.idLength)) }
    public static let idLength = 16

    /// Whether a page from `origin` may use the token.
    public func allows(origin: String) -> Bool {
        allowedOrigins.contains("*") || allowedOrigins.contains(origin.lowercased())
    }
}

/// A user account, shared by all containers (like an iCloud account).
/// A server-to-server key: the public half of a P-256 key pair whose holder signs requests
/// (`X-Apple-CloudKit-Request-SignatureV1`) to act on a container's public database as its
/// administrator. Its id is the SHA-256 of the key's DER form, in hex, so one key is
/// registered once.
public struct ServerKeyRow: Sendable, Hashable {
    public var keyID: String
    public var container: String
    public var environment: Environment
    /// The public key as PEM (`-----BEGIN PUBLIC KEY-----`).
    public var publicKeyPEM: String
    public var createdAt: Int64
    public var isRevoked: Bool

    public init(
        keyID: String, container: String, environment: Environment, publicKeyPEM: String, createdAt: Int64,
        isRevoked: Bool
    ) {
        self.keyID = keyID
        self.container = container
        self.environment = environment
        self.publicKeyPEM = publicKeyPEM
        self.createdAt = createdAt
        self.isRevoked = isRevoked
    }
}

/// What storing a server-to-server key came to.
public enum ServerKeyInsert: Sendable {
    case added
    /// The key is registered already (for any container).
    case duplicate
    /// The key's container does not exist.
    case noContainer
}

public struct UserRow: Sendable, Hashable {
    public var id: Int64
    public var name: String
    /// `pbkdf2-sha256$rounds$salt$hash` (base64 parts).
    public var passwordHash: String
    public var createdAt: Int64
    /// Disabled by an operator: the account cannot sign in (its sessions ended when it was
    /// disabled), and its data stays until it is enabled again or deleted.
    public var isDisabled: Bool

    public init(id: Int64, name: String, passwordHash: String, createdAt: Int64, isDisabled: Bool = false) {
        self.id = id
        self.name = name
        self.passwordHash = passwordHash
        self.createdAt = createdAt
        self.isDisabled = isDisabled
    }
}

/// What makes an account a person: how others may look them up, and their name. Kept beside
/// the account, read only where identities are answered (`users/caller`, discovery).
public struct UserProfile: Sendable, Hashable {
    /// Lowercased; unique among accounts.
    public var emailAddress: String?
    /// `+` and digits; unique among accounts.
    public var phoneNumber: String?
    public var nameComponents: NameComponents

    public init(emailAddress: String? = nil, phoneNumber: String? = nil, nameComponents: NameComponents = NameComponents()) {
        self.emailAddress = emailAddress
        self.phoneNumber = phoneNumber
        self.nameComponents = nameComponents
    }
}

/// What creating an account came to.
public enum UserInsert: Sendable, Hashable {
    case created(UserRow)
    case nameTaken
    case emailTaken
    case phoneTaken
}

/// A user who has used a container (signed in to it): their record name there, and whether
/// they let others of the app discover them (nil: never asked).
public struct ContainerMember: Sendable, Hashable {
    public var container: String
    public var userID: Int64
    public var userRecordName: String
    public var discoverable: Bool?
    public var joinedAt: Int64

    public init(container: String, userID: Int64, userRecordName: String, discoverable: Bool?, joinedAt: Int64) {
        self.container = container
        self.userID = userID
        self.userRecordName = userRecordName
        self.discoverable = discoverable
        self.joinedAt = joinedAt
    }
}

/// One way of finding a member of a container.
public enum UserLookup: Sendable, Hashable {
    case email(String)
    case phone(String)
    case recordName(String)
}

extension Array where Element == UserLookup {
    /// The lookups by kind, as a driver's statement asks for them.
    public var grouped: (emails: [String], phones: [String], recordNames: [String]) {
        var groups: (emails: [String], phones: [String], recordNames: [String]) = ([], [], [])
        for lookup in self {
            switch lookup {
            case .email(let email): groups.emails.append(email)
            case .phone(let phone): groups.phones.append(phone)
            case .recordName(let name): groups.recordNames.append(name)
            }
        }
        return groups
    }
}

/// A member of a container with their profile, as discovery reads them.
public struct DirectoryEntry: Sendable, Hashable {
    public var member: ContainerMember
    public var profile: UserProfile

    public init(member: ContainerMember, profile: UserProfile) {
        self.member = member
        self.profile = profile
    }
}

/// A member of a container with the name the account signs in with.
public struct NamedMember: Sendable, Hashable {
    public var userName: String
    public var entry: DirectoryEntry

    public init(userName: String, entry: DirectoryEntry) {
        self.userName = userName
        self.entry = entry
    }
}

/// A container's own settings (`nimbus containers …`); a container never set has the defaults.
public struct ContainerSettings: Sendable, Hashable {
    /// Whether users may be discovered at all (each still opts in): on by default.
    public var userDiscovery = true
    /// Whether people may make their own accounts (`/auth/1/…/signup`): off by default.
    public var signUp = false

    /// Numbers that differ from the server's defaults for this container: request budgets and
    /// quotas by name (`nimbus limits set`, `nimbus quotas set`; docs/limits.md). The service
    /// knows the names; storage keeps them as given.
    public var limits: [String: Int64] = [:]

    public init(userDiscovery: Bool = true, signUp: Bool = false, limits: [String: Int64] = [:]) {
        self.userDiscovery = userDiscovery
        self.signUp = signUp
        self.limits = limits
    }
}

extension ContainerSettings {
    /// `limits` as stored: a JSON object of integers by name, keys sorted.
    public var limitsText: String {
        JSON.object(JSONObject(limits.sorted { $0.key < $1.key }.map { ($0.key, JSON.int($0.value)) })).text
    }

    /// `limits` from its stored text; what does not read as integers by name is dropped (it
    /// was written by `limitsText`, so nothing is).
    public static func limits(fromText text: String) -> [String: Int64] {
        guard case .object(let object)? = try? JSON.parse(text) else { return [:] }
        var limits: [String: Int64] = [:]
        for key in object.keys { if let value = object[key]?.int64Value { limits[key] = value } }
        return limits
    }
}

/// Writes production refused because its schema lacks something (docs/schema.md): counted by
/// what was missing, so a deploy that was forgotten shows in the dashboard and the metrics.
public struct SchemaRefusalRow: Sendable, Hashable {
    public var container: String
    public var environment: Environment
    /// The record type, or `Type.field`, the schema lacked.
    public var missing: String
    public var count: Int64
    public var lastAt: Int64

    public init(container: String, environment: Environment, missing: String, count: Int64, lastAt: Int64) {
        self.container = container
        self.environment = environment
        self.missing = missing
        self.count = count
        self.lastAt = lastAt
    }
}

/// An OpenID Connect issuer a container accepts id tokens from (docs/identities.md).
public struct IdentityProviderRow: Sendable, Hashable {
    public var container: String
    /// The `iss` its tokens carry, exactly.
    public var issuer: String
    /// The `aud` they must be for: the app's client ID (Sign in with Apple: the bundle ID).
    public var audience: String
    /// Where its signing keys are: a JWKS file's path or an http(s) URL.
    public var jwksSource: String
    public var createdAt: Int64

    public init(container: String, issuer: String, audience: String, jwksSource: String, createdAt: Int64) {
        self.container = container
        self.issuer = issuer
        self.audience = audience
        self.jwksSource = jwksSource
        self.createdAt = createdAt
    }
}

/// What a security role may do with the records of one type in the public database.
public struct RecordPermissions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let create = RecordPermissions(rawValue: 1)
    public static let read = RecordPermissions(rawValue: 2)
    public static let write = RecordPermissions(rawValue: 4)
    public static let all: RecordPermissions = [.create, .read, .write]
}

/// One grant of a record type's security: `role` may do `permissions` with its records.
public struct SecurityGrant: Sendable, Hashable {
    public var recordType: String
    public var role: String
    public var permissions: RecordPermissions

    public init(recordType: String, role: String, permissions: RecordPermissions) {
        self.recordType = recordType
        self.role = role
        self.permissions = permissions
    }
}

/// A container environment's security: its custom roles, the grants of the record types
/// whose security was set (the others have CloudKit's defaults), and who has which role.
public struct SecurityScope: Sendable, Hashable {
    public var roles: Set<String> = []
    /// By record type, then role.
    public var grants: [String: [String: RecordPermissions]] = [:]
    /// Custom roles by user id.
    public var assignments: [Int64: Set<String>] = [:]

    public init() {}
}

/// Every container environment's security, read whole (it is small: roles, grants and
/// assignments of custom roles, never per record).
public struct SecurityState: Sendable, Hashable {
    public var scopes: [ScopeKey: SecurityScope] = [:]

    public struct ScopeKey: Sendable, Hashable {
        public var container: String
        public var environment: Environment

        public init(container: String, environment: Environment) {
            self.container = container
            self.environment = environment
        }
    }

    public init() {}

    public subscript(container: String, environment: Environment) -> SecurityScope {
        scopes[ScopeKey(container: container, environment: environment)] ?? SecurityScope()
    }
}

/// A signed-in session (web auth token). Only the token's SHA-256 is stored.
public struct SessionRow: Sendable, Hashable {
    public var tokenHash: String
    public var userID: Int64
    public var container: String
    public var environment: Environment
    public var createdAt: Int64
    public var lastUsedAt: Int64

    public init(tokenHash: String, userID: Int64, container: String, environment: Environment, createdAt: Int64, lastUsedAt: Int64) {
        self.tokenHash = tokenHash
        self.userID = userID
        self.container = container
        self.environment = environment
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
    }
}

/// One field of one record type in a container environment's schema.
public struct SchemaFieldRow: Sendable, Hashable {
    /// Index flags, as in the CloudKit Schema Language.
    public enum Indexes {
        public static let queryable = 1
        public static let sortable = 2
        public static let searchable = 4
        public static let all = 7
    }

    public var recordType: String
    public var fieldName: String
    /// `FieldType.wireName`.
    public var fieldType: String
    /// A mask of `Indexes` flags.
    public var indexes: Int

    public init(recordType: String, fieldName: String, fieldType: String, indexes: Int = Indexes.all) {
        self.recordType = recordType
        self.fieldName = fieldName
        self.fieldType = fieldType
        self.indexes = indexes
    }
}

/// One reference from a record's field to another record (one row per list element too).
/// Kept for every action: cascading deletes and validation read the DELETE_SELF and
/// VALIDATE rows, back-reference queries read them all.
public struct ReferenceRow: Sendable, Hashable {
    public var sourceZoneID: Int64
    public var sourceName: String
    public var fieldName: String
    public var targetZoneID: Int64
    public var targetName: String
    /// `ReferenceAction.rawValue`: NONE, DELETE_SELF or VALIDATE.
    public var action: String

    public init(sourceZoneID: Int64, sourceName: String, fieldName: String, targetZoneID: Int64, targetName: String, action: String) {
        self.sourceZoneID = sourceZoneID
        self.sourceName = sourceName
        self.fieldName = fieldName
        self.targetZoneID = targetZoneID
        self.targetName = targetName
        self.action = action
    }
}
