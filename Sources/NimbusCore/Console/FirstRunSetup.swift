import NimbusStorage
import NimbusWire
import Synchronization

/// The one-time link that makes the first operator in the browser (docs/dashboard.md, "First
/// run"): while a store has no operator, `nimbus serve` opens one and prints it; the link's
/// token creates one administrator, once, before it expires. Held in this process only: each
/// node prints its own, and a restart prints a fresh one while there is still no operator.
/// Only the token's hash is kept, so a memory dump shows no usable link.
final class FirstRunSetup: Sendable {
    private struct Open {
        var tokenHash: String
        var expiresAt: Int64
    }

    private let open = Mutex<Open?>(nil)

    /// A new token, replacing any earlier one.
    func start(now: Int64, lifetimeMilliseconds: Int64) -> String {
        let token = Credentials.newWebAuthToken()
        open.withLock { $0 = Open(tokenHash: Credentials.tokenHash(token), expiresAt: now + lifetimeMilliseconds) }
        return token
    }

    var isOpen: Bool { open.withLock { $0 != nil } }

    /// Spends the token: true once for the right token before it expires; a wrong token leaves
    /// the link open, an expired one closes it.
    func spend(_ token: String, now: Int64) -> Spent {
        open.withLock { open in
            guard let current = open else { return .closed }
            guard current.expiresAt > now else {
                open = nil
                return .expired
            }
            guard Credentials.constantTimeEqual(Array(Credentials.tokenHash(token).utf8), Array(current.tokenHash.utf8)) else { return .wrong }
            open = nil
            return .spent(expiresAt: current.expiresAt)
        }
    }

    /// Opens the link again, until the moment it was to expire anyway, after a spent token
    /// could not make the operator (a name or password the rules refuse), so the person at the
    /// browser can correct it.
    func reopen(_ token: String, until expiresAt: Int64) {
        open.withLock { $0 = $0 ?? Open(tokenHash: Credentials.tokenHash(token), expiresAt: expiresAt) }
    }

    enum Spent { case spent(expiresAt: Int64), wrong, expired, closed }
}

extension NimbusService {
    /// How long a first-run setup link works.
    public static let firstRunSetupMilliseconds: Int64 = 60 * 60 * 1000

    /// Opens the first-run setup link while the store has no operator; nil once one exists.
    public func openFirstRunSetup() async throws -> String? {
        guard try await operators().isEmpty else { return nil }
        return firstRunSetup.start(now: now, lifetimeMilliseconds: Self.firstRunSetupMilliseconds)
    }

    /// Whether a setup link is open (the sign-in page then says where to find it).
    public func firstRunSetupIsOpen() async throws -> Bool {
        guard firstRunSetup.isOpen else { return false }
        return try await operators().isEmpty
    }

    /// Makes the first operator, an administrator of every container, with the password the
    /// person chose, and signs them in. Refused once any operator exists, for a wrong or spent
    /// token, and after the link expired; a name or password the rules refuse leaves the link
    /// open to try again.
    public func setUpFirstOperator(token: String, name: String, password: String, clientAddress: String?) async throws -> (
        token: String, context: OperatorContext
    ) {
        let time = now
        _ = try signInThrottle.admit(address: clientAddress, account: "operator-setup", now: time)
        guard try await operators().isEmpty else {
            throw CloudKitError(.accessDenied, "an operator exists already: sign in, or ask an administrator for an account")
        }
        let expiresAt: Int64
        switch firstRunSetup.spend(token, now: time) {
        case .spent(let expiry): expiresAt = expiry
        case .wrong:
            throw CloudKitError(.authenticationFailed, "this setup link is not the one the server printed; copy the link from its output again")
        case .expired:
            throw CloudKitError(
                .authenticationFailed, "this setup link expired; restart nimbus serve for a new one, or run nimbus operators create NAME")
        case .closed:
            throw CloudKitError(
                .authenticationFailed, "no setup link is open on this server; restart nimbus serve for a new one, or run nimbus operators create NAME")
        }
        do {
            try Self.validateOperatorPassword(password)
            _ = try await insertOperator(name: name, password: password, expiresAt: nil, role: .administrator, containers: nil, by: name, action: "operators.setup")
        } catch {
            firstRunSetup.reopen(token, until: expiresAt)
            throw error
        }
        return try await signInOperator(name: name, password: password, clientAddress: clientAddress)
    }
}
