import ArgumentParser
import Foundation
import Logging
import NIOCore
import NimbusCore
import NimbusWire
import NimbusServer
import NimbusStorage
import OTel
import ServiceLifecycle

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve the CloudKit Web Services API (creates the data directory on first run).")

    @OptionGroup var data: DataOptions

    @Option(help: "Address to listen on (env NIMBUS_HOST).")
    var host: String = ProcessInfo.processInfo.environment["NIMBUS_HOST"] ?? "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one (env NIMBUS_PORT).")
    var port: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_PORT"] ?? "") ?? 8080

    @Option(help: "trace, debug, info, notice, warning, error or critical (env NIMBUS_LOG_LEVEL).")
    var logLevel: String = ProcessInfo.processInfo.environment["NIMBUS_LOG_LEVEL"] ?? "info"

    @Option(help: "Minutes a session may sit idle before it is signed out (env NIMBUS_SESSION_IDLE_MINUTES).")
    var sessionIdleMinutes: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_SESSION_IDLE_MINUTES"] ?? "") ?? 30

    @Option(
        name: .customLong("trusted-proxy"),
        help: "The address of a reverse proxy whose Forwarded / X-Forwarded-Proto / X-Forwarded-Host headers are believed; repeat for several (env NIMBUS_TRUSTED_PROXIES, comma-separated).")
    var trustedProxies: [String] =
        (ProcessInfo.processInfo.environment["NIMBUS_TRUSTED_PROXIES"] ?? "").split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespaces)
        }

    @Flag(
        help: "Let the first-run setup link work from other machines than this one (a server in a container or VM browsed from its host; env NIMBUS_SETUP_FROM_ANYWHERE=1).")
    var setupFromAnywhere = ProcessInfo.processInfo.environment["NIMBUS_SETUP_FROM_ANYWHERE"] == "1"

    @Flag(
        help: "Test mode, for an app's tests (docs/testing.md): a clock tests move and faults they switch on, at /test/1/… without credentials. Never for a server others can reach (env NIMBUS_TEST_MODE=1).")
    var testMode = ProcessInfo.processInfo.environment["NIMBUS_TEST_MODE"] == "1"

    @Option(help: "Connections one client address may hold open; 0 for no cap (env NIMBUS_CONNECTIONS_PER_CLIENT).")
    var connectionsPerClient: Int =
        Int(ProcessInfo.processInfo.environment["NIMBUS_CONNECTIONS_PER_CLIENT"] ?? "") ?? Limits.connectionsPerClient.value

    @Option(help: "Sign-in attempts one client address may make a minute (env NIMBUS_SIGN_IN_ATTEMPTS_PER_MINUTE).")
    var signInAttemptsPerMinute: Int =
        Int(ProcessInfo.processInfo.environment["NIMBUS_SIGN_IN_ATTEMPTS_PER_MINUTE"] ?? "") ?? SignInLimits().attemptsPerAddressPerMinute

    @Option(help: "Wrong passwords one account may be sent a minute: from addresses it has not signed in from, together, and from each one address (env NIMBUS_SIGN_IN_FAILURES_PER_MINUTE).")
    var signInFailuresPerMinute: Int =
        Int(ProcessInfo.processInfo.environment["NIMBUS_SIGN_IN_FAILURES_PER_MINUTE"] ?? "") ?? SignInLimits().failuresPerAccountPerMinute

    @Option(help: "Request budgets per user, key and address: on, or off for benchmarks (env NIMBUS_REQUEST_LIMITS).")
    var requestLimits: String = ProcessInfo.processInfo.environment["NIMBUS_REQUEST_LIMITS"] ?? "on"

    @Flag(help: "On PostgreSQL, count request budgets in each node's memory (several nodes then allow a budget each) rather than in the store, which all nodes share.")
    var budgetsPerNode = false

    @Option(help: "Saves one zone may have in flight on this node before ZONE_BUSY; 0 for no bound (env NIMBUS_WRITERS_PER_ZONE).")
    var writersPerZone: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_WRITERS_PER_ZONE"] ?? "") ?? 64

    @Option(help: "Storage calls that may wait at once before TRY_AGAIN_LATER; 0 for no bound (env NIMBUS_PENDING_STORAGE_CALLS).")
    var pendingStorageCalls: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_PENDING_STORAGE_CALLS"] ?? "") ?? 1_024

    @Option(help: "The largest asset in bytes (env NIMBUS_ASSET_MAX_BYTES; CloudKit's 50 MB by default).")
    var assetMaxBytes: Int64 = Int64(ProcessInfo.processInfo.environment["NIMBUS_ASSET_MAX_BYTES"] ?? "") ?? Int64(Limits.assetBytes.value)

    @Option(help: "Seconds a blob no record holds is kept before collection (env NIMBUS_ASSET_GRACE_SECONDS).")
    var assetGraceSeconds: Int64 = Int64(ProcessInfo.processInfo.environment["NIMBUS_ASSET_GRACE_SECONDS"] ?? "") ?? 86_400

    @Option(help: "Send APNs pushes to this base URL instead of Apple's (a relay, a stand-in) (env NIMBUS_APNS_ENDPOINT).")
    var apnsEndpoint: String = ProcessInfo.processInfo.environment["NIMBUS_APNS_ENDPOINT"] ?? ""

    @Option(help: "A PEM file of extra certificates to trust for the APNs endpoint.")
    var apnsCAFile: String?

    @Option(
        help: "How often, in milliseconds, the notification pipeline looks for other nodes' writes besides the store's own signals (PostgreSQL's NOTIFY) (env NIMBUS_NOTIFICATION_POLL_MS).")
    var notificationPollMs: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_NOTIFICATION_POLL_MS"] ?? "") ?? 250

    @Option(
        help: "Where the server's own backups go, taken on schedule (--backup-every) and from the dashboard: a directory, or an S3-compatible bucket as s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET[/PREFIX]?region=R[&tls=false] (env NIMBUS_BACKUP_DIR).")
    var backupDir: String? = ProcessInfo.processInfo.environment["NIMBUS_BACKUP_DIR"]

    @Option(help: "How often to take a backup into --backup-dir: 30m, 6h, 1d… (env NIMBUS_BACKUP_EVERY).")
    var backupEvery: String? = ProcessInfo.processInfo.environment["NIMBUS_BACKUP_EVERY"]

    @Option(help: "How many of the newest backups in --backup-dir to keep (env NIMBUS_BACKUP_KEEP).")
    var backupKeep: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_BACKUP_KEEP"] ?? "") ?? 7

    @Option(
        help: "Days to keep each record's earlier versions, so a zone or a user can be restored to any moment in them (nimbus restore-zone); 0 keeps none and drops what was kept (env NIMBUS_RECORD_HISTORY_DAYS).")
    var recordHistoryDays: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_RECORD_HISTORY_DAYS"] ?? "") ?? Limits.recordHistoryDays.value

    @Option(help: "Serve GET /metrics (Prometheus' text format) to a monitor on this port, without credentials; 0 picks a free one (env NIMBUS_METRICS_PORT). Operators signed in to the dashboard read it on the main port too.")
    var metricsPort: Int? = Int(ProcessInfo.processInfo.environment["NIMBUS_METRICS_PORT"] ?? "")

    @Option(
        name: .customLong("alert"),
        help: "A threshold to watch: server-errors>1%, p99>800ms, throttled>10/min or backup-age>26h; repeat for several (env NIMBUS_ALERTS, comma-separated).")
    var alerts: [String] = (ProcessInfo.processInfo.environment["NIMBUS_ALERTS"] ?? "").split(separator: ",").map(String.init)

    @Option(help: "Where to POST an alert when a threshold is crossed and when it clears (env NIMBUS_ALERT_WEBHOOK).")
    var alertWebhook: String? = ProcessInfo.processInfo.environment["NIMBUS_ALERT_WEBHOOK"]

    @Option(
        help: "Send traces (a span per request, its storage calls and pushes) over OTLP/HTTP to this collector, as in http://127.0.0.1:4318; spans go to its /v1/traces (env NIMBUS_OTLP_ENDPOINT; OTEL_* variables tune the rest).")
    var otlpEndpoint: String? = ProcessInfo.processInfo.environment["NIMBUS_OTLP_ENDPOINT"]

    @Option(
        name: .customLong("read-replica"),
        help: "A hot standby of the PostgreSQL primary, postgres://USER@HOST:PORT/DATABASE, that serves clients' reads once it has replayed this node's writes; repeat for more (env NIMBUS_READ_REPLICAS, separated by spaces).")
    var readReplicas: [String] = ProcessInfo.processInfo.environment["NIMBUS_READ_REPLICAS"]?.split(separator: " ").map(String.init) ?? []

    func run() async throws {
        var configuration = try data.configuration(readReplicas: readReplicas)
        configuration.alerts = try alertSettings(backups: configuration.backups)
        if let metricsPort {
            guard (0...65_535).contains(metricsPort), metricsPort != port || port == 0 else {
                throw ValidationError("--metrics-port must be from 0 to 65535 and not the main --port")
            }
            configuration.metricsPort = metricsPort
        }
        configuration.backups = try backupSettings()
        configuration.host = host
        configuration.port = port
        guard let level = Logger.Level(rawValue: logLevel) else { throw ValidationError("unknown --log-level '\(logLevel)'") }
        configuration.logLevel = level
        guard sessionIdleMinutes >= 1 else { throw ValidationError("--session-idle-minutes must be at least 1") }
        configuration.service.sessionIdleTimeoutMilliseconds = Int64(sessionIdleMinutes) * 60_000
        for proxy in trustedProxies where !proxy.isEmpty {
            guard (try? SocketAddress(ipAddress: proxy, port: 0)) != nil else {
                throw ValidationError("--trusted-proxy '\(proxy)' is not an IP address")
            }
            configuration.trustedProxies.insert(proxy)
        }
        guard connectionsPerClient >= 0 else { throw ValidationError("--connections-per-client must be 0 or more") }
        configuration.edge.connectionsPerClient = connectionsPerClient
        if !apnsEndpoint.isEmpty {
            guard let url = URL(string: apnsEndpoint), url.scheme == "https", url.host != nil else {
                throw ValidationError("--apns-endpoint must be an https:// URL")
            }
            configuration.apns.productionEndpoint = apnsEndpoint
            configuration.apns.developmentEndpoint = apnsEndpoint
        }
        configuration.apns.trustedCertificatesFile = apnsCAFile
        guard (10...3_600_000).contains(notificationPollMs) else {
            throw ValidationError("--notification-poll-ms must be from 10 to 3600000 (an hour)")
        }
        configuration.service.notificationPollInterval = .milliseconds(notificationPollMs)
        guard (1...1_000_000).contains(signInAttemptsPerMinute), (1...1_000_000).contains(signInFailuresPerMinute) else {
            throw ValidationError("--sign-in-attempts-per-minute and --sign-in-failures-per-minute must be from 1 to 1000000")
        }
        configuration.service.signInLimits.attemptsPerAddressPerMinute = signInAttemptsPerMinute
        configuration.service.signInLimits.failuresPerAccountPerMinute = signInFailuresPerMinute
        configuration.service.signInLimits.failuresPerAccountAndAddressPerMinute = signInFailuresPerMinute
        guard requestLimits == "on" || requestLimits == "off" else { throw ValidationError("--request-limits is on or off") }
        configuration.service.throttlesRequests = requestLimits == "on"
        configuration.service.sharesBudgetsAcrossNodes = !budgetsPerNode
        guard writersPerZone >= 0, pendingStorageCalls >= 0 else {
            throw ValidationError("--writers-per-zone and --pending-storage-calls must be 0 or more")
        }
        configuration.service.writersPerZone = writersPerZone
        configuration.service.maximumPendingStorageCalls = pendingStorageCalls
        guard assetMaxBytes > 0, assetGraceSeconds >= 0 else {
            throw ValidationError("--asset-max-bytes must be positive and --asset-grace-seconds 0 or more")
        }
        configuration.service.assets.maximumBytes = assetMaxBytes
        configuration.service.assets.collectionGraceSeconds = assetGraceSeconds
        guard (0...3_650).contains(recordHistoryDays) else {
            throw ValidationError("--record-history-days must be from 0 (keep no versions) to 3650")
        }
        configuration.service.recordHistoryDays = recordHistoryDays
        configuration.setupFromAnywhere = setupFromAnywhere
        if testMode { configuration.enableTestMode() }

        let tracing = try startTracing()
        let directory = try await DataDirectory.open(configuration)
        let bootstrap = try await Bootstrap.ensure(in: directory, configuration: configuration)
        let dataDir = configuration.dataDirectory
        let storage = configuration.storageDescription
        // The first hour (issue 38): where the dashboard is, how to get an operator while there
        // is none, and never a token that no longer works.
        let tokenLine =
            try await directory.service.apiTokenIsLive(bootstrap.apiToken)
            ? "development API token: \(bootstrap.apiToken)"
            : "development API token: revoked; make one with: nimbus tokens create --container \(bootstrap.container) --data-dir \(dataDir)"
        // While there is no operator, a one-time link makes the first one in the browser.
        let setupToken = try await directory.service.openFirstRunSetup()
        let setupReach = setupFromAnywhere ? "" : ", from this machine only"
        // A browser cannot open the wildcard address; the link names this machine instead.
        let browsable = ["0.0.0.0", "::", "[::]"].contains(host) ? "127.0.0.1" : host
        let app = NimbusServer.makeApplication(
            // The process's memory is handed back by the process, not per server (tests run
            // a hundred servers in one process).
            directory: directory, configuration: configuration, services: [MemoryReturnService(store: directory.storage as? any IdleMemoryReturning)] + (tracing.map { [$0] } ?? [])
        ) { port in
            // One line each, so scripts can pick them out; written unbuffered, as a pipe may be reading.
            var lines = [
                "Nimbus listening on http://\(host):\(port)",
                "data directory: \(dataDir)",
                "storage: \(storage)",
                "tasks: \(TaskThreads.chosen)",
                "allocator: \(MemoryReturnService.allocator.description)",
                "container: \(bootstrap.container)",
                "dashboard: http://\(browsable):\(port)/dashboard",
            ]
            if let partitioned = directory.storage as? PartitionedStorage, !partitioned.otherPartitions.isEmpty {
                // The catalog's partitions, each opened at its first use (docs/scale-out.md).
                lines.insert("partitions: " + partitioned.names.joined(separator: ", ") + " (nimbus partitions list shows each)", at: 3)
            }
            if let setupToken {
                lines.append(
                    "first operator: open http://\(browsable):\(port)/dashboard#setup=\(setupToken) (one use, within 60 minutes\(setupReach); or nimbus operators create NAME --data-dir \(dataDir))")
            }
            lines.append(tokenLine)
            if testMode {
                lines.append("test mode: clock and faults at http://\(browsable):\(port)/test/1/ without credentials (docs/testing.md); never in production")
            }
            FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
            MemoryReturnService.startupFinished()
        }
        // SIGINT and SIGTERM end the server gracefully: in-flight requests finish first.
        try await app.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        try await directory.storage.close()
    }

    /// Bootstraps swift-otel's tracer when --otlp-endpoint is given: traces only (metrics have
    /// `/metrics`, logs go to standard output). Process-wide, as swift-distributed-tracing is.
    func startTracing() throws -> (any Service)? {
        guard let endpoint = otlpEndpoint, !endpoint.isEmpty else { return nil }
        guard let url = URL(string: endpoint), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ValidationError("--otlp-endpoint must be an http:// or https:// URL, as in http://127.0.0.1:4318")
        }
        var otel = OTel.Configuration.default
        otel.serviceName = "nimbus"
        otel.metrics.enabled = false
        otel.logs.enabled = false
        otel.traces.otlpExporter.endpoint = endpoint.hasSuffix("/") ? endpoint + "v1/traces" : endpoint + "/v1/traces"
        let observability = try OTel.bootstrap(configuration: otel)
        Spans.enable()
        return observability
    }

    func alertSettings(backups: BackupSettings) throws -> AlertSettings {
        var settings = AlertSettings()
        for text in alerts where !text.trimmingCharacters(in: .whitespaces).isEmpty {
            do {
                settings.rules.append(try AlertRule(parsing: text))
            } catch {
                throw ValidationError(error.reason)
            }
        }
        if settings.rules.contains(where: { $0.figure == .backupAge }), backups.directory == nil {
            throw ValidationError("--alert backup-age needs --backup-dir: it watches the server's own backups")
        }
        if let webhook = alertWebhook, !webhook.isEmpty {
            guard let url = URL(string: webhook), url.scheme == "https" || url.scheme == "http", url.host != nil else {
                throw ValidationError("--alert-webhook must be an http:// or https:// URL")
            }
            settings.webhook = webhook
        }
        return settings
    }

    func backupSettings() throws -> BackupSettings {
        let directory = backupDir.flatMap { $0.isEmpty ? nil : $0 }
        if let directory {
            do {
                try BackupSettings.check(destination: directory)
            } catch let error as CloudKitError {
                throw ValidationError(error.reason)
            }
        }
        var every: Duration?
        if let text = backupEvery, !text.isEmpty {
            guard let interval = IntervalText.parse(text) else {
                throw ValidationError("--backup-every '\(text)' is not an interval; write a number and s, m, h or d, as in 6h")
            }
            guard directory != nil else { throw ValidationError("--backup-every needs --backup-dir: where the backups go") }
            every = interval
        }
        guard backupKeep >= 1 else { throw ValidationError("--backup-keep must be at least 1") }
        return BackupSettings(directory: directory, every: every, keep: backupKeep)
    }
}
