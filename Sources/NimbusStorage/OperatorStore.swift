/// The dashboard's people: operators (accounts of their own, apart from app users), their
/// sessions, and the audit log of what they changed (docs/dashboard.md). The coarse, async form
/// of the storage protocol (see `AccountStore`).
public protocol OperatorStore: Sendable {
    /// Adds an operator; false when the name is taken.
    func createOperator(_ row: OperatorRow) async throws -> Bool
    func operatorAccount(name: String) async throws -> OperatorRow?
    func operators() async throws -> [OperatorRow]
    /// Replaces an operator's password hash; false when there is no such operator.
    /// `expiresAt`: a one-time password's end (it must be changed before anything else); nil
    /// for a password the operator chose.
    func setOperatorPassword(name: String, passwordHash: String, expiresAt: Int64?) async throws -> Bool
    /// Sets an operator's role, containers and whether it is disabled; false when there is no
    /// such operator. A disabled operator's sessions end with it.
    func updateOperator(name: String, role: OperatorRole, containers: [String]?, disabled: Bool) async throws -> Bool
    /// Removes an operator and its sessions; false when there is no such operator. The audit
    /// log keeps what it did, under its name.
    func deleteOperator(name: String) async throws -> Bool
    /// Ends every session of an operator (its password was reset).
    func endOperatorSessions(name: String) async throws
    /// Sets an operator's second factor: the secret codes are checked against, and one being
    /// enrolled (checked only by the confirming code). Nil clears either.
    func setOperatorSecondFactor(name: String, secret: String?, pendingSecret: String?) async throws
    /// Spends one time step of an operator's codes: true the first time, false when that step
    /// (or a later one) was spent already, so a code seen once cannot sign in again on any node.
    func claimOperatorCodeStep(name: String, step: Int64) async throws -> Bool

    /// Starts a session, first removing sessions that idled past `idleBefore` or expired.
    func startOperatorSession(_ row: OperatorSessionRow, removingSessionsIdleBefore idleBefore: Int64, now: Int64) async throws
    func operatorSession(tokenHash: String) async throws -> OperatorSessionRow?
    func touchOperatorSession(tokenHash: String, at time: Int64) async throws
    func endOperatorSession(tokenHash: String) async throws

    /// Appends to the audit log; entries are never changed or removed through the dashboard.
    func appendAudit(_ entry: AuditEntry) async throws
    /// The newest entries first, up to `limit`, older than `beforeID` when given.
    func auditEntries(limit: Int, beforeID: Int64?) async throws -> [AuditEntry]
    /// Removes entries older than `time` (milliseconds since 1970), then the oldest past
    /// `keepingAtMost`: the retention's bounds, never an operator's choice. Returns how many went.
    func pruneAudit(before time: Int64, keepingAtMost entries: Int) async throws -> Int
}

public enum OperatorRole: String, Sendable, CaseIterable {
    /// Sees and changes everything in its containers.
    case administrator
    /// Sees everything in its containers, changes nothing.
    case readOnly = "read-only"
}

public struct OperatorRow: Sendable, Equatable {
    public var name: String
    public var passwordHash: String
    public var role: OperatorRole
    /// The containers this operator may see; nil: every container.
    public var containers: [String]?
    public var createdAt: Int64
    /// The TOTP secret (base32) sign-in codes are checked against; nil: password alone.
    public var secondFactor: String?
    /// A secret handed out for enrolment, active once a code from it is confirmed.
    public var pendingSecondFactor: String?
    /// A disabled operator cannot sign in, and its sessions are ended; enabling it restores it.
    public var disabled: Bool
    /// Set while the password is a one-time one (made by `operators create` or a reset): until
    /// then it signs in only to choose a password of the operator's own, and not at all after.
    public var passwordExpiresAt: Int64?

    public init(
        name: String, passwordHash: String, role: OperatorRole, containers: [String]?, createdAt: Int64,
        secondFactor: String? = nil, pendingSecondFactor: String? = nil, disabled: Bool = false, passwordExpiresAt: Int64? = nil
    ) {
        self.name = name
        self.passwordHash = passwordHash
        self.role = role
        self.containers = containers
        self.createdAt = createdAt
        self.secondFactor = secondFactor
        self.pendingSecondFactor = pendingSecondFactor
        self.disabled = disabled
        self.passwordExpiresAt = passwordExpiresAt
    }

    /// An administrator of every container that is not disabled: at least one must remain.
    public var administersEverything: Bool { role == .administrator && containers == nil && !disabled }

    public func maySee(container: String) -> Bool { containers?.contains(container) ?? true }

    /// Whether a log entry or figure about `container` is this operator's to see: one about no
    /// container is for operators of every container only.
    public func maySee(entryAbout container: String?) -> Bool { container.map(maySee(container:)) ?? (containers == nil) }
}

public struct OperatorSessionRow: Sendable, Equatable {
    public var tokenHash: String
    public var operatorName: String
    /// The token state-changing requests must echo in `X-Nimbus-CSRF` (the session's cookie
    /// alone does not do: another site's form would carry it).
    public var csrfToken: String
    public var createdAt: Int64
    public var lastSeenAt: Int64
    public var expiresAt: Int64

    public init(tokenHash: String, operatorName: String, csrfToken: String, createdAt: Int64, lastSeenAt: Int64, expiresAt: Int64) {
        self.tokenHash = tokenHash
        self.operatorName = operatorName
        self.csrfToken = csrfToken
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
        self.expiresAt = expiresAt
    }
}

public struct AuditEntry: Sendable, Equatable {
    public var id: Int64
    public var at: Int64
    public var operatorName: String
    /// What was done, as `area.verb` (`operators.create`, `records.modify`, …).
    public var action: String
    public var container: String?
    /// What it was done to, for a person reading the log.
    public var detail: String

    public init(id: Int64 = 0, at: Int64, operatorName: String, action: String, container: String?, detail: String) {
        self.id = id
        self.at = at
        self.operatorName = operatorName
        self.action = action
        self.container = container
        self.detail = detail
    }
}

/// How an operator's container list is stored: NULL for every container, else the names one a
/// line (container identifiers hold no line breaks).
public enum OperatorContainers {
    public static func stored(_ containers: [String]?) -> String? { containers?.joined(separator: "\n") }

    public static func read(_ stored: String?) -> [String]? {
        stored.map { $0.isEmpty ? [] : $0.split(separator: "\n").map(String.init) }
    }
}
