import Foundation
import NimbusStorage
import NimbusWire

/// A fault a test switches on (docs/testing.md): the next matching requests meet what the
/// server answers in that situation, produced where the server produces it for real, so an
/// app that handles it under test handles it in production. Only a server in test mode has a
/// switchboard (`NimbusService.Options.faults`); without one nothing here runs.
public struct Fault: Sendable, Hashable, Identifiable {
    public enum Kind: String, Sendable, CaseIterable {
        /// `THROTTLED` (HTTP 429) with `retryAfter`, where request budgets refuse: NimbusKit's
        /// `requestRateLimited`.
        case throttled
        /// `ZONE_BUSY` (HTTP 503) with `retryAfter`, where a zone's writers are counted: `zoneBusy`.
        case zoneBusy
        /// `TRY_AGAIN_LATER` (HTTP 503) with `retryAfter`, as when storage is busy: `serviceUnavailable`.
        case tryAgainLater
        /// The request is carried out, then its connection is cut before the answer ends: the
        /// client cannot tell whether it happened (`networkFailure`).
        case connectionReset
        /// The next save of a record meets `CONFLICT` with the server's record, as when another
        /// device saved it first; in an atomic zone batch the rest then fail `ATOMIC_ERROR`.
        case conflict
        /// A zone's change feed answers `CHANGE_TOKEN_EXPIRED` for the token it is given:
        /// the client must drop its cache of the zone and fetch from no token.
        case changeTokenExpired
        /// Notifications are stored in the user's collection but not pushed to their devices.
        case pushDropped
        /// Notifications are pushed `delaySeconds` late.
        case pushDelayed
    }

    public let id: String
    public var kind: Kind
    /// For `throttled`, `zoneBusy`, `tryAgainLater`: the seconds the answer asks to wait.
    public var retryAfter: Int
    /// For `pushDelayed`.
    public var delaySeconds: Int
    // The scope: every field set must match; nil matches anything.
    public var container: String?
    /// The user's name (as they sign in).
    public var user: String?
    /// The same user's id, where a place checking knows only that (notification delivery);
    /// the test-mode routes fill it in from `user`.
    public var userID: Int64?
    /// The end of the request's path (`records/modify`, `changes/zone`), for request faults.
    public var route: String?
    public var zone: String?
    /// For `conflict`: the record whose next save conflicts.
    public var recordName: String?
    /// How many matching requests (or notifications) meet it; nil: until it is switched off.
    public var remaining: Int?

    public init(
        _ kind: Kind, retryAfter: Int = 1, delaySeconds: Int = 2, container: String? = nil, user: String? = nil, route: String? = nil,
        zone: String? = nil, recordName: String? = nil, count: Int? = 1
    ) {
        id = UUID().uuidString.lowercased()
        self.kind = kind
        self.retryAfter = retryAfter
        self.delaySeconds = delaySeconds
        self.container = container
        self.user = user
        self.route = route
        self.zone = zone
        self.recordName = recordName
        remaining = count
    }

    /// What a fault is checked against: the request's caller and what it touches.
    public struct Subject: Sendable {
        public var container: String?
        public var user: String?
        public var userID: Int64?
        public var route: String?
        public var zone: String?
        public var recordName: String?

        /// What `caller` touches: its container and user, and what the place checking adds.
        public init(caller: Caller, route: String? = nil, zone: String? = nil, recordName: String? = nil) {
            self.init(container: caller.container, user: caller.user?.name, route: route, zone: zone, recordName: recordName)
        }

        public init(
            container: String? = nil, user: String? = nil, userID: Int64? = nil, route: String? = nil, zone: String? = nil,
            recordName: String? = nil
        ) {
            self.container = container
            self.user = user
            self.userID = userID
            self.route = route
            self.zone = zone
            self.recordName = recordName
        }
    }

    func matches(_ subject: Subject) -> Bool {
        func same(_ wanted: String?, _ actual: String?) -> Bool { wanted == nil || wanted == actual }
        if let route, !(subject.route.map { $0 == route || $0.hasSuffix("/" + route) } ?? false) { return false }
        let sameUser = user == nil || subject.user == user || (userID != nil && subject.userID == userID)
        return sameUser && same(container, subject.container) && same(zone, subject.zone) && same(recordName, subject.recordName)
    }

    /// The error a refusal fault answers with: the code, status and `retryAfter` the real
    /// refusal has; the reason says it was switched on.
    public var refusal: CloudKitError? {
        let code: ServerErrorCode
        switch kind {
        case .throttled: code = .throttled
        case .zoneBusy: code = .zoneBusy
        case .tryAgainLater: code = .tryAgainLater
        default: return nil
        }
        var error = CloudKitError(code, "\(code) switched on by a test (fault \(id)); try again after retryAfter seconds")
        error.retryAfter = retryAfter
        return error
    }
}

/// The faults a test has switched on, and the clock it moves (docs/testing.md).
public final class FaultSwitchboard: Sendable {
    private let faults = Locked<[Fault]>([])
    /// The server's clock in test mode: real time plus what the test advanced it by.
    public let clock: TestModeClock

    public init(clock: TestModeClock = TestModeClock()) {
        self.clock = clock
    }

    public func add(_ fault: Fault) { faults.withLock { $0.append(fault) } }

    public var all: [Fault] { faults.withLock { $0 } }

    /// Switches off one fault (by id), or all of them; returns how many went.
    @discardableResult
    public func remove(id: String? = nil) -> Int {
        faults.withLock { faults in
            let before = faults.count
            faults.removeAll { id == nil || $0.id == id }
            return before - faults.count
        }
    }

    /// The first fault of `kinds` matching `subject`, spending one of its count.
    public func take(_ kinds: Set<Fault.Kind>, _ subject: Fault.Subject) -> Fault? {
        return faults.withLock { faults in
            guard let index = faults.firstIndex(where: { kinds.contains($0.kind) && $0.matches(subject) }) else { return nil }
            let fault = faults[index]
            if let remaining = fault.remaining {
                if remaining <= 1 { faults.remove(at: index) } else { faults[index].remaining = remaining - 1 }
            }
            return fault
        }
    }
}

/// The clock of a server in test mode: the real time plus what the test advanced it by, so
/// budgets refill and sessions age as usual and a test can still jump hours ahead.
public final class TestModeClock: WallClock, Sendable {
    private let offset = Locked<Int64>(0)

    public init() {}

    public func nowMilliseconds() -> Int64 {
        SystemClock().nowMilliseconds() + offset.withLock { $0 }
    }

    public func advance(milliseconds: Int64) {
        offset.withLock { $0 += max(0, milliseconds) }
    }

    /// How far ahead of the real time it runs.
    public var advancedMilliseconds: Int64 { offset.withLock { $0 } }
}

extension NimbusService {
    /// `fault` with its user's id filled in (notification delivery knows users by id);
    /// `NOT_FOUND` when the user it names does not exist.
    public func resolvingUser(of fault: Fault) async throws -> Fault {
        guard let name = fault.user else { return fault }
        guard let row = try await accounts.user(name: name) else {
            throw CloudKitError(.notFound, "user: there is no user '\(Names.escaped(name))'")
        }
        var resolved = fault
        resolved.userID = row.id
        return resolved
    }
}
