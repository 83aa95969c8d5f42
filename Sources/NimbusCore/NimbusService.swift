import Logging
import Crypto
import NimbusBlobs
import NimbusStorage
import NimbusWire

/// CloudKit's semantics over a storage driver: accounts and sessions, zones, records, change
/// feeds and the schema. The HTTP layer parses and authenticates; this decides.
///
/// Facets live in `NimbusService+Accounts.swift`, `+Zones`, `+Records`, `+Changes`, `+Schema`.
public final class NimbusService: Sendable {
    public struct Options: Sendable {
        /// A session not used for this long is signed out (CloudKit: 30 minutes).
        public var sessionIdleTimeoutMilliseconds: Int64 = 30 * 60 * 1000
        /// PBKDF2 rounds for new passwords.
        public var passwordRounds: Int = Credentials.defaultPasswordRounds
        /// Where passwords are hashed and checked: off the executor's threads.
        public var passwordHashing: PasswordHashing = .shared
        /// How fast sign-ins may come, per client address and per account (docs/limits.md).
        public var signInLimits = SignInLimits()
        /// Request budgets and quotas every container has unless it sets its own (docs/limits.md).
        public var containerLimits = ContainerLimit.defaults
        /// Whether requests spend from budgets at all (`nimbus serve --request-limits off`, for
        /// benchmarks that are one user at full speed). Quotas hold either way.
        public var throttlesRequests = true
        /// Whether budgets are counted in the store, so several nodes on it allow one budget
        /// together (PostgreSQL; `nimbus serve --budgets-per-node` turns it off, each node then
        /// counting its own). A store of one process counts in memory either way.
        public var sharesBudgetsAcrossNodes = true
        /// Requests one client address may send that fail authentication: a burst of this
        /// many, then this many a minute; past them it is refused before its credentials are
        /// looked at.
        public var failedAuthenticationsPerMinute = 60
        /// Storage calls that may wait at once; past it `TRY_AGAIN_LATER` (`RetryingStorage`).
        public var maximumPendingStorageCalls = 1_024
        /// `records/modify` requests one zone may have in flight at once on this node; past it
        /// `ZONE_BUSY` with `retryAfter` (0: no bound).
        public var writersPerZone = 64
        public var clock: any WallClock = SystemClock()
        /// The faults a test switched on (docs/testing.md); nil unless the server is in test mode,
        /// and then nothing checks for them.
        public var faults: FaultSwitchboard?
        /// The processor time one query may take (`Limits.queryMilliseconds`); tests lower it.
        public var queryBudget: Duration = .milliseconds(Limits.queryMilliseconds.value)
        /// How long notifications stay in the collection (docs/notifications.md).
        public var notificationRetentionMilliseconds: Int64 = 28 * 86_400_000
        /// How often the notification pipeline looks at the outbox and the collection without
        /// being woken: what a crash left, what other nodes stored (docs/notifications.md).
        public var notificationPollInterval: Duration = .milliseconds(250)
        /// Notifications one write may create (`Limits.notificationsPerWrite`).
        public var notificationsPerWrite = Limits.notificationsPerWrite.value
        /// Where the service reports what it could not do on its own (a subscription it had
        /// to leave out, notifications it could not store). Injected; `nimbus serve` passes
        /// the server's logger.
        public var logger = Logger(label: "nimbus.core")
        /// Where asset bytes are kept (docs/assets.md); nil for a service that serves no assets
        /// (the admin verbs). `nimbus serve` passes files under the data directory or S3.
        public var blobs: (any BlobStore)?
        public var assets = AssetOptions()
        /// Days to keep records' earlier versions for time travel (`Limits.recordHistoryDays`;
        /// 0 keeps none), set on the store as the service starts. nil leaves the store's
        /// setting as it is: the admin verbs must not undo what the server was started with.
        public var recordHistoryDays: Int? = Limits.recordHistoryDays.value
        /// How often record versions and audit entries past their retention are removed
        /// (`nimbus serve`, `runRetention`).
        public var recordHistoryPruneInterval: Duration = .seconds(3600)

        public init() {}
    }

    /// The asset flow's numbers (docs/assets.md, docs/limits.md).
    public struct AssetOptions: Sendable {
        /// One asset's bytes (CloudKit: 50 MB over Web Services).
        public var maximumBytes = Int64(Limits.assetBytes.value)
        /// How long an upload URL may be used (CloudKit: 15 minutes).
        public var uploadURLSeconds: Int64 = 900
        /// How long an upload's receipt may be saved into a record.
        public var receiptSeconds: Int64 = 3_600
        /// How long a download URL works, at least.
        public var downloadURLSeconds: Int64 = 3_600
        /// How long a blob no record holds is kept after the last upload or rereference that
        /// vouched for it. Never less than `receiptSeconds` and five minutes: a receipt still
        /// valid must find its blob (`effectiveGraceSeconds`).
        public var collectionGraceSeconds: Int64 = 86_400
        /// How often `nimbus serve` collects.
        public var collectionInterval: Duration = .seconds(600)

        public init() {}

        public var effectiveGraceSeconds: Int64 { max(collectionGraceSeconds, receiptSeconds + 300) }
    }

    /// The driver, wrapped so that transactions that collide with concurrent ones run again.
    public let storage: RetryingStorage
    public let options: Options
    /// Containers, tokens, users, sessions: the coarse async store (`AccountStore`).
    var accounts: any AccountStore { storage.accounts }
    var logger: Logger { options.logger }
    let keys: DerivedKeys
    let credentialCache = CredentialCache()
    /// The security state (docs/roles.md), read whole and kept as credentials are: a request
    /// and a notification drain decide from it without a storage read each; changes through
    /// this process clear it, another process's count within the lifetime. One entry, key "".
    let securityCache = ExpiringCache<SecurityState>(lifetime: CredentialCache.lifetimeMilliseconds, capacity: 1)
    let identityKeyCache = IdentityKeyCache()
    /// Container settings (limit overrides among them), kept as credentials are, by container.
    let settingsCache = ExpiringCache<ContainerSettings>(lifetime: CredentialCache.lifetimeMilliseconds, capacity: 10_000)
    /// Members per container, for the public quota's per-user allowance.
    let memberCountCache = ExpiringCache<Int64>(lifetime: CredentialCache.lifetimeMilliseconds, capacity: 10_000)
    /// Request budgets by caller and kind of work (NimbusService+Limits.swift).
    let requestBudgets = TokenBuckets(.init(capacity: 1, perMinute: 1), maximumKeys: 200_000)
    /// Tokens leased from the store's shared budgets, spent here one a request.
    let budgetLeases = BudgetLeases()
    let failedAuthentications: TokenBuckets
    /// Resumable asset uploads being received or kept in part (`ResumableUploads.swift`).
    let resumableUploads = ResumableUploads()
    /// `records/modify` requests in flight per zone (`Options.writersPerZone`).
    let zoneWriters = ZoneWriters()
    /// What each device has been served, not yet stored (the sync doctor).
    let deviceSync = DeviceSyncLedger()
    let signInThrottle: SignInThrottle
    /// The link that makes the first operator (`FirstRunSetup.swift`).
    let firstRunSetup = FirstRunSetup()
    let knownDatabases = KnownDatabases()
    /// Each schema's lookups, made once for its rows (`SchemaDigests`).
    let schemaDigests = SchemaDigests()
    /// Committed changes on their way to subscription matching and delivery.
    public let notificationHub = NotificationHub()

    public init(storage: any StorageDriver, options: Options = Options()) async throws {
        self.storage = RetryingStorage(storage, maximumPending: options.maximumPendingStorageCalls)
        self.options = options
        signInThrottle = SignInThrottle(options.signInLimits)
        let failures = max(1, options.failedAuthenticationsPerMinute)
        failedAuthentications = TokenBuckets(.init(capacity: failures, perMinute: failures))
        let secret = try await storage.read { try $0.installationSecret() }
        keys = DerivedKeys(installationSecret: secret)
        try await rebuildIndexesIfRequested()
        try await loadSubscriptions()
        if let days = options.recordHistoryDays, let history = recordHistory {
            _ = try await history.keepRecordHistory(days: max(0, days), now: now)
        }
    }

    var now: Int64 { options.clock.nowMilliseconds() }
}

/// Who is asking: the container and environment their API token is for, the signed-in user
/// if any, and the device the request says it comes from.
public struct Caller: Sendable, Hashable {
    public struct User: Sendable, Hashable {
        public let id: Int64
        public let name: String
        /// The user's record name in this container (`_` + 32 hex).
        public let recordName: String
        /// The session's current web auth token, echoed in every response.
        public let webAuthToken: String
    }

    /// A server-to-server key that signed the request: it acts on the container's public
    /// database as its administrator (docs/keys.md).
    public struct ServerKey: Sendable, Hashable {
        public let keyID: String
        /// What its changes are stamped with (`created.userRecordName`).
        public let recordName: String

        public init(keyID: String, recordName: String) {
            self.keyID = keyID
            self.recordName = recordName
        }
    }

    public let container: String
    public let environment: Environment
    public let user: User?
    public let deviceID: String
    public let serverKey: ServerKey?
    /// The API token's id (its hash's first 16 hex digits), when the request carried one: calls
    /// without a user spend from the token's budget as well as their address's.
    public let apiTokenID: String?

    public init(
        container: String, environment: Environment, user: User?, deviceID: String, serverKey: ServerKey? = nil, apiTokenID: String? = nil
    ) {
        self.container = container
        self.environment = environment
        self.user = user
        self.deviceID = deviceID
        self.serverKey = serverKey
        self.apiTokenID = apiTokenID
    }

    /// The signed-in user, or `AUTHENTICATION_REQUIRED` (`ACCESS_DENIED` for a server-to-server
    /// key, which has no user to sign in and reaches only the public database).
    public func requireUser(for what: String) throws(CloudKitError) -> User {
        if serverKey != nil {
            throw CloudKitError(
                .accessDenied,
                "\(what) needs a signed-in user; a server-to-server key acts on the public database only")
        }
        guard let user else {
            throw CloudKitError(
                .authenticationRequired,
                "\(what) needs a signed-in user: sign in at /auth/1/\(container)/\(environment.rawValue)/signin and send the token as ckWebAuthToken")
        }
        return user
    }

    /// Who may save records: a signed-in user or a server-to-server key; else
    /// `AUTHENTICATION_REQUIRED`.
    public func requireWriter(for what: String) throws(CloudKitError) {
        if serverKey == nil { _ = try requireUser(for: what) }
    }

    /// Whether the caller may change any record of the public database, not only its own.
    var isAdministrator: Bool { serverKey != nil }

    /// Who a change is attributed to in `created` / `modified`.
    var stampUserRecordName: String { user?.recordName ?? serverKey?.recordName ?? Names.defaultOwner }
}

/// One database of a request: the caller and the scope named in the URL.
public struct DatabaseTarget: Sendable {
    public let caller: Caller
    public let scope: DatabaseScope
    /// The server's address as the client reached it: where asset upload and download URLs
    /// point. Nil where no answer carries a URL (then assets come back without one).
    public let assetBaseURL: String?
    /// Set when answering with another user's zones (a share's owner, docs/sharing.md): the
    /// owner their zone IDs name.
    var zoneOwner: String?
    /// Set for an operator browsing data in the dashboard: a production query reads every
    /// record of its type in pages and filters them in memory (`NimbusService+Console.swift`),
    /// so browsing needs no QUERYABLE index.
    var operatorScan = false
    /// Set for a time travel's batch: who made each record it brings back, and when, so a
    /// restored record keeps its creator (in the public database, the creator's write access).
    var restoredCreations: [String: ChangeStamp] = [:]

    public init(caller: Caller, scope: DatabaseScope, assetBaseURL: String? = nil) {
        self.caller = caller
        self.scope = scope
        self.assetBaseURL = assetBaseURL
    }

    /// The logical database, or `AUTHENTICATION_REQUIRED` for a private or shared database
    /// without a signed-in user.
    func key() throws(CloudKitError) -> DatabaseKey {
        switch scope {
        case .public:
            return DatabaseKey(container: caller.container, environment: caller.environment, scope: .public, ownerID: 0)
        case .private, .shared:
            let user = try caller.requireUser(for: "The \(scope.rawValue) database")
            return DatabaseKey(container: caller.container, environment: caller.environment, scope: scope, ownerID: user.id)
        }
    }

    /// The owner name of this database's custom zones.
    var zoneOwnerName: String { zoneOwner ?? caller.user?.recordName ?? Names.defaultOwner }

    /// This target answering with `owner`'s zones.
    func viewingZones(of owner: String) -> DatabaseTarget {
        var view = self
        view.zoneOwner = owner
        return view
    }
}
