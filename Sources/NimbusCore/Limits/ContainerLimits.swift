import NimbusStorage

/// A number a container may set for itself (`nimbus limits set`, `nimbus quotas set`): the
/// request budgets (per minute, a burst of as many) and the quotas (bytes). The server's
/// defaults are `NimbusService.Options.containerLimits`; docs/limits.md lists them.
public enum ContainerLimit: String, CaseIterable, Sendable {
    /// Cheap requests (lookups, saves, zone and subscription calls, …) of one signed-in user.
    case userRequestsPerMinute
    /// Pages of queries and change feeds of one signed-in user.
    case userPagesPerMinute
    /// Cheap requests with the API token alone (no user), per client address.
    case anonymousRequestsPerMinute
    /// Pages with the API token alone, per client address.
    case anonymousPagesPerMinute
    /// Cheap requests with the API token alone from every address together: what a web app's
    /// token may be used for in all, however many addresses use it.
    case apiTokenRequestsPerMinute
    /// Pages with the API token alone from every address together.
    case apiTokenPagesPerMinute
    /// Cheap requests of one server-to-server key.
    case serverKeyRequestsPerMinute
    /// Pages of one server-to-server key.
    case serverKeyPagesPerMinute
    /// What one user's private database may hold.
    case privateDatabaseBytes
    /// What the public database may hold before any user joins...
    case publicDatabaseBytes
    /// ...and what each user who joins the container adds to it (CloudKit's public quota grows
    /// with the app's users).
    case publicBytesPerUser

    public var isQuota: Bool {
        switch self {
        case .privateDatabaseBytes, .publicDatabaseBytes, .publicBytesPerUser: true
        default: false
        }
    }

    /// Nimbus's numbers: an honest app's busiest user (a first sync on a new device, a burst of
    /// saves) stays well inside them; a runaway loop does not.
    public static let defaults: [ContainerLimit: Int64] = [
        .userRequestsPerMinute: 1_200,
        .userPagesPerMinute: 600,
        .anonymousRequestsPerMinute: 600,
        .anonymousPagesPerMinute: 300,
        .apiTokenRequestsPerMinute: 60_000,
        .apiTokenPagesPerMinute: 30_000,
        .serverKeyRequestsPerMinute: 12_000,
        .serverKeyPagesPerMinute: 6_000,
        .privateDatabaseBytes: 1 << 30,
        .publicDatabaseBytes: 1 << 30,
        .publicBytesPerUser: 10 << 20,
    ]

    /// The smallest value it may be set to: a budget of 0 would refuse everything; a quota of
    /// 0 is allowed (nothing may be stored).
    public var minimum: Int64 { isQuota ? 0 : 1 }
}

/// The numbers one container runs with: its overrides over the server's defaults.
public struct EffectiveLimits: Sendable, Hashable {
    public let defaults: [ContainerLimit: Int64]
    public let overrides: [String: Int64]

    public subscript(limit: ContainerLimit) -> Int64 {
        overrides[limit.rawValue] ?? defaults[limit] ?? ContainerLimit.defaults[limit]!
    }
}

/// What kind of work a request is, for its budget: a page of a query or a change feed walks
/// data and costs more than a lookup or a save, so it draws from a budget of its own.
public enum RequestCost: Sendable {
    case request
    case page
}

/// A caller's budget after a request spent from it: what `RateLimit-*` headers publish.
public struct RateLimitStatus: Sendable, Hashable {
    /// The budget: a burst of this many, and this many a minute.
    public let limit: Int64
    public let remaining: Int
    /// Seconds until the budget is whole again.
    public let resetSeconds: Int64
}
