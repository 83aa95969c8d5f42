import Foundation
import NimbusStorage
import NimbusWire

/// The dashboard's operators (docs/dashboard.md): accounts apart from app users, created with a
/// one-time password, signed in to sessions that idle out after 30 minutes and end after 12
/// hours, each with a CSRF token; read-only operators and per-container access; every change
/// made through the admin API written to the audit log.
extension NimbusService {
    public static let operatorSessionIdleMilliseconds: Int64 = 30 * 60 * 1000
    public static let operatorSessionLifetimeMilliseconds: Int64 = 12 * 3600 * 1000
    /// How stale `last_seen_at` may be before a request writes it again.
    static let operatorTouchInterval: Int64 = 60 * 1000
    /// How long a one-time password (a new operator's, or a reset's) signs in: long enough to
    /// reach a colleague, short enough that a forgotten one does not stay a way in.
    public static let oneTimePasswordLifetimeMilliseconds: Int64 = 24 * 3600 * 1000

    /// A signed-in operator, as a request to the admin API finds it.
    public struct OperatorContext: Sendable {
        public let account: OperatorRow
        public let session: OperatorSessionRow

        /// Refuses a change by a read-only operator, or to a container the operator may not see.
        public func requireChange(container: String? = nil) throws {
            guard account.role == .administrator else {
                throw CloudKitError(.accessDenied, "operator '\(account.name)' is read-only: ask an administrator to make this change")
            }
            if let container { try requireSight(of: container) }
        }

        /// Refuses what concerns a container outside the operator's list; creating operators
        /// and containers needs an operator of every container.
        public func requireSight(of container: String) throws {
            guard account.maySee(container: container) else {
                throw CloudKitError(.accessDenied, "operator '\(account.name)' has no access to container '\(container)'")
            }
        }

        public func requireEveryContainer() throws {
            guard account.containers == nil else {
                throw CloudKitError(.accessDenied, "operator '\(account.name)' is limited to some containers; this needs an operator of all")
            }
        }
    }

    /// Makes an operator and returns its one-time password (shown once; change it after signing
    /// in). `by` names who did it (`cli` from the command line) for the audit log.
    public func createOperator(name: String, role: OperatorRole, containers: [String]?, by actor: String) async throws -> (
        OperatorRow, password: String
    ) {
        let password = Credentials.base64URL(Credentials.randomBytes(18))
        let row = try await insertOperator(
            name: name, password: password, expiresAt: now + Self.oneTimePasswordLifetimeMilliseconds, role: role, containers: containers,
            by: actor, action: "operators.create")
        return (row, password)
    }

    /// Checks an operator's name and containers, stores it with `password` hashed, audits it.
    /// `expiresAt`: when the password is a one-time one, its end.
    func insertOperator(
        name: String, password: String, expiresAt: Int64?, role: OperatorRole, containers: [String]?, by actor: String, action: String
    ) async throws -> OperatorRow {
        guard (1...64).contains(name.count), name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }) else {
            throw CloudKitError.badRequest("an operator name is 1 to 64 letters, digits, '.', '_' or '-'; '\(Names.escaped(name))' is not")
        }
        try await requireContainers(containers)
        let rounds = options.passwordRounds
        let hash = try await options.passwordHashing.run { Result { try Credentials.hashPassword(password, rounds: rounds) } }.get()
        let row = OperatorRow(name: name, passwordHash: hash, role: role, containers: containers, createdAt: now, passwordExpiresAt: expiresAt)
        guard try await storage.operators.createOperator(row) else {
            throw CloudKitError(.exists, "operator '\(name)' already exists")
        }
        try await audit(
            actor, action, container: nil,
            "operator \(name), \(role.rawValue), \(containers.map { "containers \($0.joined(separator: ", "))" } ?? "every container")")
        return row
    }

    /// NOT_FOUND naming the first of `containers` that does not exist.
    private func requireContainers(_ containers: [String]?) async throws {
        guard let containers else { return }
        let known = Set(try await accounts.containers().map(\.id))
        if let unknown = containers.first(where: { !known.contains($0) }) {
            throw CloudKitError(.notFound, "container '\(Names.escaped(unknown))' does not exist")
        }
    }

    /// What a password an operator chooses must be.
    static func validateOperatorPassword(_ password: String) throws(CloudKitError) {
        guard password.count >= 12 else { throw .badRequest("a new password has at least 12 characters") }
        guard password.utf8.count <= 1024 else { throw .badRequest("a new password has at most 1024 bytes") }
    }

    public func operators() async throws -> [OperatorRow] { try await storage.operators.operators() }

    /// Checks an operator's password (on the hashing threads, limited like app sign-ins) and
    /// starts a session; returns the session's token (the cookie) and its CSRF token.
    /// An operator with a second factor also gives the code of this 30-second step.
    public func signInOperator(name: String, password: String, code: String? = nil, clientAddress: String?) async throws -> (
        token: String, context: OperatorContext
    ) {
        let admission = try signInThrottle.admit(address: clientAddress, account: "operator:\(name)", now: now)
        let account = try await storage.operators.operatorAccount(name: name)
        // Hash even for an unknown name, so timing does not tell which operators exist.
        let stored = account?.passwordHash ?? "pbkdf2-sha256$\(options.passwordRounds)$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        let matches = try await options.passwordHashing.run { Credentials.verifyPassword(password, against: stored) }
        guard let account, matches else {
            let pause = signInThrottle.failed(admission, now: now)
            if pause > .zero { try await Task.sleep(for: pause) }
            throw CloudKitError(.authenticationFailed, "unknown operator or wrong password")
        }
        if let secret = account.secondFactor {
            guard let code, !code.isEmpty else {
                throw CloudKitError(
                    .authenticationFailed, "operator '\(account.name)' signs in with a second factor: add the 6-digit code your authenticator app shows")
            }
            try await spendCode(code, secret: secret, operatorName: account.name, admission: admission)
        }
        // Said only to whoever knows the password: an unknown name and a wrong password read alike.
        if account.disabled {
            throw CloudKitError(.authenticationFailed, "operator '\(account.name)' is disabled; an administrator can enable it again")
        }
        if let expiry = account.passwordExpiresAt, expiry <= now {
            throw CloudKitError(
                .authenticationFailed,
                "the one-time password of operator '\(account.name)' expired; ask an administrator for a new one (nimbus operators passwd \(account.name))")
        }
        let token = Credentials.newWebAuthToken()
        let time = now
        let session = OperatorSessionRow(
            tokenHash: Credentials.tokenHash(token), operatorName: account.name, csrfToken: Credentials.newWebAuthToken(),
            createdAt: time, lastSeenAt: time, expiresAt: time + Self.operatorSessionLifetimeMilliseconds)
        try await storage.operators.startOperatorSession(
            session, removingSessionsIdleBefore: time - Self.operatorSessionIdleMilliseconds, now: time)
        signInThrottle.succeeded(admission, now: time)
        return (token, OperatorContext(account: account, session: session))
    }

    /// The operator behind a session cookie; `AUTHENTICATION_REQUIRED` when there is none or
    /// it idled out or expired.
    public func operatorContext(token: String?) async throws -> OperatorContext {
        guard let token, !token.isEmpty else {
            throw CloudKitError(.authenticationRequired, "sign in to the dashboard first")
        }
        let store = storage.operators
        let hash = Credentials.tokenHash(token)
        guard let session = try await store.operatorSession(tokenHash: hash) else {
            throw CloudKitError(.authenticationRequired, "this dashboard session is not valid (signed out or unknown); sign in again")
        }
        let time = now
        guard session.lastSeenAt >= time - Self.operatorSessionIdleMilliseconds, session.expiresAt > time else {
            try await store.endOperatorSession(tokenHash: hash)
            throw CloudKitError(.authenticationRequired, "your dashboard session expired; sign in again")
        }
        guard let account = try await store.operatorAccount(name: session.operatorName), !account.disabled else {
            try await store.endOperatorSession(tokenHash: hash)
            throw CloudKitError(.authenticationRequired, "operator '\(session.operatorName)' no longer exists or was disabled")
        }
        if session.lastSeenAt < time - Self.operatorTouchInterval { try await store.touchOperatorSession(tokenHash: hash, at: time) }
        return OperatorContext(account: account, session: session)
    }

    /// Checks a code against a secret and spends its step; a wrong code counts as a failed
    /// sign-in (the throttle's pauses apply), a code used before is refused.
    private func spendCode(_ code: String, secret: String, operatorName: String, admission: SignInThrottle.Admission) async throws {
        guard let step = OneTimeCode.matchingStep(code, secret: secret, atMilliseconds: now) else {
            let pause = signInThrottle.failed(admission, now: now)
            if pause > .zero { try await Task.sleep(for: pause) }
            throw CloudKitError(
                .authenticationFailed, "that code is not the one your authenticator app shows now (check the phone's clock if this repeats)")
        }
        guard try await storage.operators.claimOperatorCodeStep(name: operatorName, step: step) else {
            throw CloudKitError(.authenticationFailed, "that code was used already; wait for the next one")
        }
    }

    /// Changes the signed-in operator's password (the one-time one first of all).
    public func changeOperatorPassword(current: String, new password: String, as context: OperatorContext) async throws {
        try Self.validateOperatorPassword(password)
        guard password != current else { throw CloudKitError.badRequest("the new password is the current one; choose another") }
        let stored = context.account.passwordHash
        guard try await options.passwordHashing.run({ Credentials.verifyPassword(current, against: stored) }) else {
            throw CloudKitError(.authenticationFailed, "the current password is wrong; the password is unchanged")
        }
        let rounds = options.passwordRounds
        let hash = try await options.passwordHashing.run { Result { try Credentials.hashPassword(password, rounds: rounds) } }.get()
        guard try await storage.operators.setOperatorPassword(name: context.account.name, passwordHash: hash, expiresAt: nil) else {
            throw CloudKitError(.notFound, "operator '\(context.account.name)' no longer exists")
        }
        try await audit(context.account.name, "operators.password", container: nil, "operator \(context.account.name) changed its password")
    }

    /// Starts enrolling a second factor: a new secret, kept aside until a code from it is
    /// confirmed (a secret never confirmed never guards a sign-in). Returns the secret and the
    /// `otpauth://` address an authenticator app takes.
    public func beginSecondFactor(as context: OperatorContext) async throws -> (secret: String, uri: String) {
        let secret = OneTimeCode.newSecret()
        try await storage.operators.setOperatorSecondFactor(
            name: context.account.name, secret: context.account.secondFactor, pendingSecret: secret)
        return (secret, OneTimeCode.provisioningURI(secret: secret, account: context.account.name))
    }

    /// Confirms enrolment with a code from the new secret; from then on sign-in asks for codes.
    public func confirmSecondFactor(code: String, as context: OperatorContext) async throws {
        let name = context.account.name
        let pending = try await spendCode(code, of: \.pendingSecondFactor, as: context, missing: "no second factor is being set up for operator '\(name)'; start again")
        try await storage.operators.setOperatorSecondFactor(name: name, secret: pending, pendingSecret: nil)
        try await audit(name, "operators.second-factor.enable", container: nil, "operator \(name) turned on its second factor")
    }

    /// Turns the signed-in operator's second factor off, with a current code as proof.
    public func removeSecondFactor(code: String, as context: OperatorContext) async throws {
        let name = context.account.name
        _ = try await spendCode(code, of: \.secondFactor, as: context, missing: "operator '\(name)' has no second factor")
        try await storage.operators.setOperatorSecondFactor(name: name, secret: nil, pendingSecret: nil)
        try await audit(name, "operators.second-factor.disable", container: nil, "operator \(name) turned off its second factor")
    }

    /// Spends a code of the signed-in operator's stored secret (as it is now, not as the
    /// session began) and returns that secret; `missing` is the refusal when there is none.
    private func spendCode(_ code: String, of secret: KeyPath<OperatorRow, String?>, as context: OperatorContext, missing: String)
        async throws -> String
    {
        let name = context.account.name
        guard let account = try await storage.operators.operatorAccount(name: name), let stored = account[keyPath: secret] else {
            throw CloudKitError.badRequest(missing)
        }
        // A signed-in operator's wrong codes count against the account's shared allowance.
        let admission = SignInThrottle.Admission(account: "operator:\(name)", address: nil, knownDevice: false)
        try await spendCode(code, secret: stored, operatorName: name, admission: admission)
        return stored
    }

    /// Clears an operator's second factor from the command line: the way back for one who
    /// lost the phone (whoever runs `nimbus` on the host has the data anyway).
    public func clearSecondFactor(operatorName name: String, by actor: String) async throws {
        guard try await storage.operators.operatorAccount(name: name) != nil else {
            throw CloudKitError(.notFound, "operator '\(Names.escaped(name))' does not exist")
        }
        try await storage.operators.setOperatorSecondFactor(name: name, secret: nil, pendingSecret: nil)
        try await audit(actor, "operators.second-factor.clear", container: nil, "operator \(name)'s second factor cleared")
    }

    public func signOutOperator(token: String) async throws {
        try await storage.operators.endOperatorSession(tokenHash: Credentials.tokenHash(token))
    }

    /// Writes one line of the audit log.
    public func audit(_ operatorName: String, _ action: String, container: String?, _ detail: String) async throws {
        try await storage.operators.appendAudit(
            AuditEntry(at: now, operatorName: operatorName, action: action, container: container, detail: detail))
    }

    /// The audit log, newest first, in pages of at most 200; an operator of some containers
    /// sees the entries of those only.
    public func auditLog(for context: OperatorContext, limit: Int, beforeID: Int64?) async throws -> [AuditEntry] {
        let entries = try await storage.operators.auditEntries(limit: min(max(limit, 1), 200), beforeID: beforeID)
        return entries.filter { context.account.maySee(entryAbout: $0.container) }
    }
}

extension NimbusService {
    /// Removes an operator and ends its sessions (`nimbus operators delete`). Refused for the
    /// last administrator of every container: nobody could then create operators, reset
    /// development or see every container from the dashboard.
    public func deleteOperator(name: String, by actor: String) async throws {
        let all = try await operators()
        guard let account = all.first(where: { $0.name == name }) else {
            throw CloudKitError(.notFound, "there is no operator '\(Names.escaped(name))'")
        }
        if account.administersEverything { try Self.keepAnAdministrator(all, without: name, so: "deleted") }
        guard try await storage.operators.deleteOperator(name: name) else {
            throw CloudKitError(.notFound, "there is no operator '\(Names.escaped(name))'")
        }
        try await audit(actor, "operators.delete", container: nil, "operator \(name), \(account.role.rawValue)")
    }

    /// Gives an operator a new one-time password and ends its sessions (a forgotten password,
    /// or one that may have leaked); returns the password, shown once.
    public func resetOperatorPassword(name: String, by actor: String) async throws -> String {
        let password = Credentials.base64URL(Credentials.randomBytes(18))
        let rounds = options.passwordRounds
        let hash = try await options.passwordHashing.run { Result { try Credentials.hashPassword(password, rounds: rounds) } }.get()
        let expiry = now + Self.oneTimePasswordLifetimeMilliseconds
        guard try await storage.operators.setOperatorPassword(name: name, passwordHash: hash, expiresAt: expiry) else {
            throw CloudKitError(.notFound, "there is no operator '\(Names.escaped(name))'")
        }
        try await storage.operators.endOperatorSessions(name: name)
        try await audit(actor, "operators.password-reset", container: nil, "operator \(name): a new one-time password; sessions ended")
        return password
    }

    /// Changes an operator's role, containers and whether it is disabled (nil keeps each as
    /// it is; `containers: .some(nil)` means every container). The last enabled administrator
    /// of every container keeps being one. Disabling ends the operator's sessions; other
    /// changes apply to its next request.
    public func updateOperator(
        name: String, role: OperatorRole? = nil, containers: [String]?? = nil, disabled: Bool? = nil, by actor: String
    ) async throws -> OperatorRow {
        let all = try await operators()
        guard var account = all.first(where: { $0.name == name }) else {
            throw CloudKitError(.notFound, "there is no operator '\(Names.escaped(name))'")
        }
        let before = account
        if let role { account.role = role }
        if let containers { account.containers = containers }
        if let disabled { account.disabled = disabled }
        try await requireContainers(account.containers)
        if before.administersEverything, !account.administersEverything {
            try Self.keepAnAdministrator(all, without: name, so: account.disabled ? "disabled" : "limited")
        }
        guard try await storage.operators.updateOperator(name: name, role: account.role, containers: account.containers, disabled: account.disabled)
        else { throw CloudKitError(.notFound, "there is no operator '\(Names.escaped(name))'") }
        var changes: [String] = []
        if account.role != before.role { changes.append("role \(account.role.rawValue)") }
        if account.containers != before.containers {
            changes.append(account.containers.map { "containers \($0.joined(separator: ", "))" } ?? "every container")
        }
        if account.disabled != before.disabled { changes.append(account.disabled ? "disabled, sessions ended" : "enabled") }
        try await audit(actor, "operators.change", container: nil, "operator \(name): \(changes.isEmpty ? "unchanged" : changes.joined(separator: "; "))")
        return account
    }

    /// Refuses to leave no enabled administrator of every container: nobody could then make
    /// operators, reset development or see every container from the dashboard.
    static func keepAnAdministrator(_ operators: [OperatorRow], without name: String, so change: String) throws {
        guard operators.contains(where: { $0.name != name && $0.administersEverything }) else {
            throw CloudKitError.badRequest(
                "'\(name)' is the last administrator of every container who can sign in, so it cannot be \(change); make another first (nimbus operators create NAME)")
        }
    }
}
