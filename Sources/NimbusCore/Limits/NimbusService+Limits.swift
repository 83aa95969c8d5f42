import NimbusStorage
import NimbusWire

/// Request budgets (throttling) and quotas (docs/limits.md).
///
/// Budgets are token buckets, one per caller and kind of work: a signed-in user, a
/// server-to-server key, or (with the API token alone) a client address and the token itself,
/// so a web app's token has a total however many addresses use it. Over budget a request gets
/// `THROTTLED` with `retryAfter`, before it reaches storage. The buckets are the store's where
/// it keeps them (PostgreSQL: every node spends from the same ones, leasing a few tokens at a
/// time; `SharedBudgetLedger`), else this node's memory (SQLite: one process).
///
/// Quotas count the bytes of live records (`RecordRow.storedBytes`) per database, in the
/// write's own transaction (`ChangeLog.usedBytes`), so a quota holds however writes interleave.
extension NimbusService {
    // MARK: Container limits

    /// The numbers `container` runs with (its overrides kept as its settings are: 2 s).
    public func limits(container: String) async throws -> EffectiveLimits {
        effectiveLimits(try await settings(container: container))
    }

    /// The numbers settings already read stand for, with the server's defaults.
    func effectiveLimits(_ settings: ContainerSettings) -> EffectiveLimits {
        EffectiveLimits(defaults: options.containerLimits, overrides: settings.limits)
    }

    /// Sets (a number) or clears (nil: back to the server's default) a container's limits.
    public func setLimits(container: String, _ changes: [ContainerLimit: Int64?]) async throws {
        try Self.checkLimits(changes)
        try await changeSettings(container: container) { Self.apply(changes, to: &$0) }
    }

    /// Refuses a limit below its minimum, naming it.
    static func checkLimits(_ changes: [ContainerLimit: Int64?]) throws(CloudKitError) {
        for case (let limit, let value?) in changes where value < limit.minimum {
            throw CloudKitError.badRequest("\(limit.rawValue) must be \(limit.minimum) or more, not \(value)")
        }
    }

    static func apply(_ changes: [ContainerLimit: Int64?], to settings: inout ContainerSettings) {
        for (limit, value) in changes { settings.limits[limit.rawValue] = value }
    }

    /// A container's settings, read through a cache like credentials' (another process's
    /// change counts within 2 s; this process's at once).
    func settings(container: String) async throws -> ContainerSettings {
        let time = now
        if let settings = settingsCache.value(for: container, now: time) { return settings }
        let settings = try await accounts.containerSettings(container: container)
        settingsCache.remember(settings, for: container, now: time)
        return settings
    }

    // MARK: Budgets

    /// Spends one request of `caller`'s budget for `cost`; `THROTTLED` with `retryAfter` when
    /// it is spent. Nil when budgets are off (`Options.throttlesRequests`).
    public func admit(_ caller: Caller, address: String?, cost: RequestCost) async throws -> RateLimitStatus? {
        guard options.throttlesRequests else { return nil }
        let limits = try await limits(container: caller.container)
        let (key, limit): (String, ContainerLimit)
        let kind = cost == .page ? "p" : "r"
        if let user = caller.user {
            key = "u\(kind)\u{0}\(caller.container)\u{0}\(user.id)"
            limit = cost == .page ? .userPagesPerMinute : .userRequestsPerMinute
        } else if let serverKey = caller.serverKey {
            key = "k\(kind)\u{0}\(serverKey.keyID)"
            limit = cost == .page ? .serverKeyPagesPerMinute : .serverKeyRequestsPerMinute
        } else {
            key = "a\(kind)\u{0}\(caller.container)\u{0}\(address ?? "")"
            limit = cost == .page ? .anonymousPagesPerMinute : .anonymousRequestsPerMinute
        }
        var status = try await spend(key, limit, limits, cost: cost)
        // Without a user, the token's total too (after the address's: an address over its own
        // budget does not eat into everyone's).
        if caller.user == nil, caller.serverKey == nil, let tokenID = caller.apiTokenID {
            let total = try await spend(
                "t\(kind)\u{0}\(tokenID)", cost == .page ? .apiTokenPagesPerMinute : .apiTokenRequestsPerMinute, limits, cost: cost)
            if total.remaining < status.remaining { status = total }
        }
        return status
    }

    /// One request from the bucket `key` at `limit`'s rate; `ThrottledRequest` when it is empty.
    /// The bucket is the store's, shared by every node, where the store keeps them (leased a
    /// few tokens at a time); else this node's.
    private func spend(_ key: String, _ limit: ContainerLimit, _ limits: EffectiveLimits, cost: RequestCost) async throws
        -> RateLimitStatus
    {
        let perMinute = limits[limit]
        let capacity = Int(clamping: perMinute)
        let time = now
        let spent: TokenBuckets.Spend
        if let ledger = sharedBudgets {
            spent = try await spendShared(key, capacity: capacity, ledger: ledger, now: time)
        } else {
            spent = requestBudgets.spend(key, rate: TokenBuckets.Rate(capacity: capacity, perMinute: capacity), now: time)
        }
        let status = RateLimitStatus(limit: perMinute, remaining: spent.remaining, resetSeconds: (spent.untilFull + 999) / 1000)
        guard spent.admitted else {
            var error = CloudKitError(
                .throttled,
                "over the budget of \(perMinute) \(cost == .page ? "query and change-feed pages" : "requests") a minute (\(limit.rawValue), docs/limits.md); wait retryAfter seconds")
            error.retryAfter = Int((spent.wait + 999) / 1000)
            throw ThrottledRequest(error: error, status: status)
        }
        return status
    }

    /// The store's shared budgets, when it keeps them and they are on.
    var sharedBudgets: (any SharedBudgetLedger)? {
        options.sharesBudgetsAcrossNodes ? (storage.base as? any SharedBudgetsStoring)?.sharedBudgets : nil
    }

    /// A token from this node's lease on `key` (`BudgetLeases`): one write to the store a lease,
    /// not one a request.
    private func spendShared(_ key: String, capacity: Int, ledger: any SharedBudgetLedger, now time: Int64) async throws
        -> TokenBuckets.Spend
    {
        try await budgetLeases.spend(key, capacity: capacity, ledger: ledger, now: time)
    }

    /// Whether `address` may try to authenticate: an address whose recent requests failed
    /// authentication more than `Options.unauthenticatedRequestsPerMinute` times is refused
    /// without looking at its credentials.
    public func admitUnauthenticated(address: String?) throws(CloudKitError) {
        guard options.throttlesRequests, let wait = failedAuthentications.wait(address ?? "", now: now) else { return }
        throw Self.tooManyFailures(wait: wait)
    }

    /// Counts a request from `address` that failed authentication; the error to answer with
    /// instead when that was one too many.
    public func countFailedAuthentication(address: String?) -> CloudKitError? {
        guard options.throttlesRequests, let wait = failedAuthentications.take(address ?? "", now: now) else { return nil }
        return Self.tooManyFailures(wait: wait)
    }

    private static func tooManyFailures(wait milliseconds: Int64) -> CloudKitError {
        var error = CloudKitError(
            .throttled,
            "too many requests from this address failed authentication; check the API token and session, and wait retryAfter seconds")
        error.retryAfter = Int((milliseconds + 999) / 1000)
        return error
    }

    // MARK: Quotas

    /// The bytes the database may hold: the private quota for a user's database, the public
    /// quota and each member's allowance for the public database.
    func quota(for key: DatabaseKey) async throws -> Int64 {
        let limits = try await limits(container: key.container)
        guard key.scope == .public else { return limits[.privateDatabaseBytes] }
        let time = now
        let members: Int64
        if let cached = memberCountCache.value(for: key.container, now: time) {
            members = cached
        } else {
            members = try await accounts.memberCount(container: key.container)
            memberCountCache.remember(members, for: key.container, now: time)
        }
        let (perUser, overflow) = limits[.publicBytesPerUser].multipliedReportingOverflow(by: members)
        let (total, overflow2) = limits[.publicDatabaseBytes].addingReportingOverflow(perUser)
        return overflow || overflow2 ? .max : total
    }

    /// `QUOTA_EXCEEDED` for a save that would take the database from `used` bytes past `quota`.
    static func quotaExceeded(_ scope: DatabaseScope, used: Int64, adding bytes: Int64, quota: Int64, recordName: String) -> CloudKitError {
        let whose = scope == .public ? "the app's public database" : "your \(scope.rawValue) database"
        return CloudKitError(
            .quotaExceeded,
            "saving record '\(recordName)' needs \(bytes) more bytes, and \(whose) holds \(used) of its \(quota); delete records to make room",
            recordName: recordName)
    }

    /// The signed-in caller's private database against its quota; nil without a user.
    public func callerUsage(_ caller: Caller) async throws -> StorageFigures? {
        guard let user = caller.user else { return nil }
        let usage = try await usage(
            of: DatabaseKey(container: caller.container, environment: caller.environment, scope: .private, ownerID: user.id))
        return StorageFigures(usedBytes: usage.usedBytes, quotaBytes: usage.quotaBytes)
    }

    /// What a database holds and may hold (`users/caller`, `nimbus quotas show`).
    public func usage(of key: DatabaseKey) async throws -> DatabaseUsage {
        let database = try await storage.read(in: key) { tx in try tx.database(key) }
        var historyBytes: Int64 = 0
        if let database, let history = recordHistory {
            historyBytes = try await history.recordHistoryFigures(databaseID: database.id).bytes
        }
        return DatabaseUsage(usedBytes: database?.usedBytes ?? 0, quotaBytes: try await quota(for: key), historyBytes: historyBytes)
    }
}

/// A database's storage against its quota.
public struct DatabaseUsage: Sendable, Hashable {
    public let usedBytes: Int64
    public let quotaBytes: Int64
    /// What its records' earlier versions take, kept for time travel; shown beside the quota,
    /// never counted against it (the app did not choose to keep them).
    public let historyBytes: Int64
}

/// A request over its budget: the error to answer, and the budget to publish with it.
public struct ThrottledRequest: Error {
    public let error: CloudKitError
    public let status: RateLimitStatus
}

extension NimbusService {
    /// A user's private database in a container environment against its quota
    /// (`nimbus quotas show --user`).
    public func privateUsage(container: String, environment: Environment, userName: String) async throws -> DatabaseUsage {
        let user = try await person(userName)
        return try await usage(of: DatabaseKey(container: container, environment: environment, scope: .private, ownerID: user.id))
    }

    /// The public database of a container environment against its quota.
    public func publicUsage(container: String, environment: Environment) async throws -> DatabaseUsage {
        try await usage(of: DatabaseKey(container: container, environment: environment, scope: .public, ownerID: 0))
    }
}
