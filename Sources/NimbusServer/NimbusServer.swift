import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NimbusBlobs
import NimbusCore
import NimbusPush
import NimbusStorage
import NimbusWire
import ServiceLifecycle

/// Everything `nimbus serve` needs to start, with embedded defaults.
public struct ServerConfiguration: Sendable {
    public var dataDirectory: String = "nimbus-data"
    public var host: String = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var port: Int = 8080
    public var logLevel: Logger.Level = .info
    /// The logger for the server and the service (`logLevel` applies to it); tests inject one
    /// that captures lines.
    public var logger = Logger(label: "nimbus", factory: ServerLogHandler.init)
    /// The storage driver, picked by the composition root.
    public var storage: StorageOpener
    public var service = NimbusService.Options()
    /// Where pushes for APNs device tokens go (Apple's endpoints unless changed).
    public var apns = APNsSettings()
    /// How long a web-courier long poll (`GET /webcourier/aps`) waits for a notification.
    public var webCourierPollTimeout: Duration = .seconds(30)
    /// Timeouts and the per-address connection cap at the HTTP edge.
    public var edge = EdgeLimits()
    /// Peer addresses whose `Forwarded` / `X-Forwarded-Proto` / `X-Forwarded-Host` headers are
    /// believed (a reverse proxy in front of Nimbus).
    public var trustedProxies: Set<String> = []
    /// Where asset bytes go (docs/assets.md): files under the data directory, or a bucket.
    public var assetStore: AssetStoreChoice = .files
    /// The server's own backups: where, how often, how many (docs/operations.md).
    public var backups = BackupSettings()
    /// The port of the listener that serves `GET /metrics` to a monitor without credentials
    /// (on `host`); nil for none (operators still read it on the main port); 0 picks a free one.
    public var metricsPort: Int?
    /// Thresholds on the figures and the webhook told when one is crossed or clears.
    public var alerts = AlertSettings()
    /// How often the request log's new entries are stored (tests make it short).
    public var requestLogFlushInterval: Duration = .seconds(1)
    /// Whether the first-run setup link works from other machines than this one (a server in a
    /// container or VM whose operator browses from the host); loopback only by default.
    public var setupFromAnywhere = false

    public init(storage: StorageOpener) {
        self.storage = storage
    }

    /// Test mode (docs/testing.md): the service's clock runs ahead when a test says so, and
    /// faults a test switches on (`/test/1/…`, `NimbusTesting`) are met. Never for production:
    /// the switches need no credentials.
    public mutating func enableTestMode() {
        let faults = FaultSwitchboard()
        service.faults = faults
        service.clock = faults.clock
    }

    /// Where the data is, as `nimbus serve` prints it.
    public var storageDescription: String { storage.description(dataDirectory) }

    /// `logger` at `logLevel`.
    public var leveledLogger: Logger {
        var logger = logger
        logger.logLevel = logLevel
        return logger
    }
}

/// Where a server keeps asset bytes.
public enum AssetStoreChoice: Sendable, Hashable {
    /// `<data directory>/assets/blobs` (`FileBlobStore`).
    case files
    /// An S3-compatible bucket (`S3BlobStore`).
    case s3(S3BlobStore.Location)

    /// `files`, or `s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET[/PREFIX]?region=R[&tls=false]`
    /// (`nimbus serve --asset-store`).
    public init(parsing text: String) throws {
        if text.isEmpty || text == "files" {
            self = .files
            return
        }
        guard let location = try S3Bucket.Location.parsing(text, option: "--asset-store") else {
            throw CloudKitError.badRequest(
                "--asset-store: '\(text)' is neither files nor s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET[/PREFIX]?region=REGION")
        }
        self = .s3(location)
    }
}

/// The data directory's storage and service, opened (and created) on demand. Used by
/// `nimbus serve` and by every admin verb, which work on the same files.
public struct DataDirectory: Sendable {
    public let storage: any StorageDriver
    public let service: NimbusService
    /// Backups into `ServerConfiguration.backups`' directory, on schedule or on request.
    public let backups: BackupKeeper
    /// The figures `/metrics` serves.
    public let metrics: ServerMetrics

    public static func open(_ configuration: ServerConfiguration) async throws -> DataDirectory {
        try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true)
        let storage = try await configuration.storage.open(configuration.dataDirectory)
        var options = configuration.service
        options.logger = configuration.leveledLogger
        if options.blobs == nil {
            let root = (configuration.dataDirectory as NSString).appendingPathComponent("assets")
            switch configuration.assetStore {
            case .files:
                options.blobs = try await FileBlobStore.open(root: root)
            case .s3(let location):
                // Uploads are staged under the data directory, then sent to the bucket.
                let store = try await S3BlobStore.open(location, stagingRoot: root)
                try await store.createBucketIfMissing()
                options.blobs = store
            }
        }
        let service = try await NimbusService(storage: storage, options: options)
        let backups = BackupKeeper(
            settings: configuration.backups, storage: storage, blobs: options.blobs, dataDirectory: configuration.dataDirectory,
            logger: configuration.leveledLogger)
        let metrics = ServerMetrics()
        metrics.addStoreSources(storage: storage, service: service, backups: backups)
        return DataDirectory(storage: storage, service: service, backups: backups, metrics: metrics)
    }
}

/// The first-run setup: a default container with a development API token, remembered in
/// `bootstrap.json` in the data directory (readable by its owner only) so every start can
/// print it.
public struct Bootstrap: Codable, Sendable {
    public static let defaultContainer = "iCloud.nimbus.default"

    public var container: String
    public var apiToken: String

    public static func ensure(in directory: DataDirectory, configuration: ServerConfiguration) async throws -> Bootstrap {
        let path = (configuration.dataDirectory as NSString).appendingPathComponent("bootstrap.json")
        if let data = FileManager.default.contents(atPath: path),
            let existing = try? JSONDecoder().decode(Bootstrap.self, from: data)
        {
            return existing
        }
        let service = directory.service
        if try await service.containers().contains(where: { $0.id == defaultContainer }) == false {
            try await service.createContainer(id: defaultContainer)
        }
        let token = try await service.createAPIToken(container: defaultContainer, environment: .development)
        let bootstrap = Bootstrap(container: defaultContainer, apiToken: token)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard
            FileManager.default.createFile(
                atPath: path, contents: try encoder.encode(bootstrap), attributes: [.posixPermissions: 0o600])
        else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        return bootstrap
    }
}

/// Builds the Hummingbird application serving a data directory.
public enum NimbusServer {
    public static func makeApplication(
        directory: DataDirectory, configuration: ServerConfiguration, services extraServices: [any Service] = [],
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let service = directory.service
        let backups = directory.backups
        let metrics = directory.metrics
        let logger = configuration.leveledLogger
        let connections = LiveConnections { owner, deviceID, sequence in
            service.notePushed(owner: owner, deviceID: deviceID, sequence: sequence)
        }
        let courier = WebCourier(service: service, pollTimeout: configuration.webCourierPollTimeout)
        let apns = APNsDelivery(service: service, settings: configuration.apns, logger: logger)
        for sink: any NotificationSink in [connections, courier, apns] { service.notificationHub.addSink(sink) }
        let edge = configuration.edge
        let budget = BodyBudget(
            .init(total: edge.bodyBytesInFlight, perClient: edge.bodyBytesPerClient, perCaller: edge.bodyBytesPerCaller))
        let parts = ServerParts(
            service: service, courier: courier, logger: logger, bodyBudget: budget, backups: backups, metrics: metrics,
            requestLogStore: (directory.storage as? any RequestLogStoring)?.requestLog,
            archiveInterval: configuration.requestLogFlushInterval, setupFromAnywhere: configuration.setupFromAnywhere,
            storeDescription: configuration.storageDescription,
            storeFigures: directory.storage as? any StoreFigures)
        metrics.addServerSources(connections: connections, apns: apns)
        let (router, responder) = NimbusRouter.make(parts: parts, trustedProxies: configuration.trustedProxies)
        let counter = ConnectionCounter()
        // Requests are answered from the connection's pipeline (`ExchangeHandler`) through the
        // router's responder; the application's own responder is not used.
        let respond = ExchangeHandler.respond(through: responder, logger: logger)
        let server = HTTPServerBuilder { _ in
            GuardedChannel(
                inner: NotificationStreamChannel(respond: respond, service: service, connections: connections),
                limits: edge, bodyLimits: parts.bodies.limits, counter: counter, isStreamPath: NotificationSocket.isStreamPath)
        }
        return Application(
            router: router,
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port), serverName: "Nimbus"),
            services: [
                NotificationPipelineService(service: service, connections: connections), apns, AssetCollectionService(service: service),
                RetentionService(service: service), DeviceSyncService(service: service),
            ]
                + (backups.settings.every == nil ? [] : [ScheduledBackupService(keeper: backups)])
                + (parts.archive.map { [$0] } ?? [])
                + [
                    AlertWatcher(
                        settings: configuration.alerts, requests: parts.requests, backups: backups, clock: service.options.clock,
                        logger: logger)
                ]
                + (configuration.metricsPort.map { [MetricsRoutes.listener(metrics, host: configuration.host, port: $0, logger: logger)] } ?? [])
                + extraServices,
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? configuration.port) },
            logger: logger)
    }
}

/// Stores what devices were served, a second at a time (the sync doctor, docs/sync-doctor.md).
struct DeviceSyncService: Service {
    let service: NimbusService

    func run() async throws {
        await cancelWhenGracefulShutdown { await service.runDeviceSyncLedger() }
    }
}

/// Removes record versions and audit entries past their retention, now and then.
struct RetentionService: Service {
    let service: NimbusService

    func run() async throws {
        await cancelWhenGracefulShutdown { await service.runRetention() }
    }
}

/// Collects asset blobs no record holds, now and then (`AssetOptions.collectionInterval`).
struct AssetCollectionService: Service {
    let service: NimbusService

    func run() async throws {
        guard service.options.blobs != nil else { return }
        await cancelWhenGracefulShutdown { await service.runAssetCollection() }
    }
}
