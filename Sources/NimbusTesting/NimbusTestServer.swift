import Foundation
import Logging
import NimbusCore
@_exported import NimbusKit
import NimbusSQLite
import NimbusServer
import NimbusStorage
import NimbusWire
import ServiceLifecycle

/// A fault a test switches on (docs/testing.md).
public typealias Fault = NimbusCore.Fault

/// A real Nimbus server inside the test process, for an app's tests (docs/testing.md): a
/// throwaway SQLite store, a free loopback port, a container with API tokens, users made on
/// demand, and NimbusKit containers already pointed at it, each a device of its own. The clock
/// runs ahead when the test says so, and faults the test switches on are met exactly where the
/// server meets them for real.
///
/// ```swift
/// try await NimbusTestServer.with { server in
///     let phone = try await server.device(of: "alice")
///     try server.switchOn(Fault(.throttled, retryAfter: 3, route: "records/modify"))
///     …
/// }
/// ```
public final class NimbusTestServer: Sendable {
    public let serverURL: URL
    public let containerIdentifier: String
    public let developmentAPIToken: String
    public let productionAPIToken: String
    /// The server's service, for what a test wants to look at directly.
    public let service: NimbusService
    private let faults: FaultSwitchboard
    private let directory: DataDirectory
    private let scratch: URL
    private let group: ServiceGroup
    private let task: Task<Void, any Error>
    private let devices = DeviceFolders()

    /// Starts a server (well under a second). `configure` adjusts the configuration before it
    /// starts (limits, notification timing); the store, port and test mode are this type's.
    public static func start(
        containerIdentifier: String = "iCloud.test.app", configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> NimbusTestServer {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("nimbus-testing-" + UUID().uuidString, isDirectory: true)
        var configuration = ServerConfiguration.forTests(dataDirectory: scratch.appendingPathComponent("data").path)
        configure(&configuration)
        configuration.port = 0
        configuration.enableTestMode()
        guard let faults = configuration.service.faults else { throw NimbusTestingError("test mode did not switch on") }
        do {
            let directory = try await DataDirectory.open(configuration)
            let service = directory.service
            try await service.createContainer(id: containerIdentifier)
            let development = try await service.createAPIToken(container: containerIdentifier, environment: .development)
            let production = try await service.createAPIToken(container: containerIdentifier, environment: .production)
            let (ports, reported) = AsyncStream<Int>.makeStream()
            let app = NimbusServer.makeApplication(directory: directory, configuration: configuration) { port in
                reported.yield(port)
                reported.finish()
            }
            let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "nimbus.testing"))
            let task = Task { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else {
                try? await directory.storage.close()
                throw NimbusTestingError("the test server did not start")
            }
            return NimbusTestServer(
                serverURL: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: containerIdentifier,
                developmentAPIToken: development, productionAPIToken: production, service: service, faults: faults,
                directory: directory, scratch: scratch, group: group, task: task)
        } catch {
            try? FileManager.default.removeItem(at: scratch)
            throw error
        }
    }

    private init(
        serverURL: URL, containerIdentifier: String, developmentAPIToken: String, productionAPIToken: String, service: NimbusService,
        faults: FaultSwitchboard, directory: DataDirectory, scratch: URL, group: ServiceGroup, task: Task<Void, any Error>
    ) {
        self.serverURL = serverURL
        self.containerIdentifier = containerIdentifier
        self.developmentAPIToken = developmentAPIToken
        self.productionAPIToken = productionAPIToken
        self.service = service
        self.faults = faults
        self.directory = directory
        self.scratch = scratch
        self.group = group
        self.task = task
    }

    /// Stops the server and removes its store and every device's files.
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
        try? await directory.storage.close()
        try? FileManager.default.removeItem(at: scratch)
    }

    /// Runs `body` against a new server and stops it afterwards, also when `body` throws.
    public static func with<T>(
        containerIdentifier: String = "iCloud.test.app", configure: (inout ServerConfiguration) -> Void = { _ in },
        _ body: (NimbusTestServer) async throws -> T
    ) async throws -> T {
        let server = try await start(containerIdentifier: containerIdentifier, configure: configure)
        do {
            let result = try await body(server)
            await server.stop()
            return result
        } catch {
            await server.stop()
            throw error
        }
    }

    // MARK: Users and devices

    /// The password every user of a test server has.
    public static func password(of user: String) -> String { "nimbus-test-\(user)" }

    /// Makes an account (`EXISTS` if there is one by that name).
    public func createUser(_ name: String) async throws {
        _ = try await service.createUser(name: name, password: Self.password(of: name))
    }

    /// A device of `user`, signed in on first use: a `CKContainer` of its own (device ID,
    /// session, encryption keys, long-lived journals, asset cache), the user made first when
    /// there is none. Call it again with another `name` for the user's second device.
    public func device(
        of user: String, named name: String = "device-1", environment: NimbusConfiguration.Environment = .development
    ) async throws -> CKContainer {
        do {
            try await createUser(user)
        } catch let error as CloudKitError where error.code == .exists {}  // made before: a second device
        return CKContainer(configuration: configuration(of: user, device: name, environment: environment))
    }

    /// A device with no user signed in (the public database's readers).
    public func anonymousDevice(environment: NimbusConfiguration.Environment = .development) -> CKContainer {
        CKContainer(configuration: configuration(of: nil, device: "anonymous-" + UUID().uuidString, environment: environment))
    }

    /// The configuration `device(of:named:)` uses, for an app that makes its own containers.
    public func configuration(
        of user: String?, device name: String, environment: NimbusConfiguration.Environment = .development
    ) -> NimbusConfiguration {
        var configuration = NimbusConfiguration(
            serverURL: serverURL, apiToken: environment == .development ? developmentAPIToken : productionAPIToken,
            environment: environment, containerIdentifier: containerIdentifier, username: user, password: user.map(Self.password),
            deviceID: "\(user ?? "anonymous")-\(name)")
        let folder = devices.folder(user: user ?? "", device: name, under: scratch)
        configuration.encryptionKeyDirectory = folder.appendingPathComponent("keys", isDirectory: true)
        configuration.longLivedOperationDirectory = folder.appendingPathComponent("journals", isDirectory: true)
        configuration.assetCacheDirectory = folder.appendingPathComponent("assets", isDirectory: true)
        return configuration
    }

    // MARK: The clock and faults

    /// Moves the server's clock ahead (sessions age, budgets refill, retention and expiry come
    /// due). It goes on running from there.
    public func advanceClock(by duration: Duration) {
        faults.clock.advance(milliseconds: duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Switches a fault on until it is spent (`count`) or switched off; returns it (its `id`
    /// switches it off). A fault naming a user who does not exist is refused.
    @discardableResult
    public func switchOn(_ fault: Fault) async throws -> Fault {
        let resolved = try await service.resolvingUser(of: fault)
        faults.add(resolved)
        return resolved
    }

    /// Switches off one fault, or every fault.
    public func switchOff(_ fault: Fault? = nil) {
        faults.remove(id: fault?.id)
    }

    /// The faults still on, with what is left of their counts.
    public var faultsOn: [Fault] { faults.all }

    /// Signs `user` out on every device, as an expired or revoked session does: their next
    /// request needing the session meets `AUTHENTICATION_REQUIRED` (NimbusKit signs in again
    /// when it has the password; an app holding only a web auth token sees `notAuthenticated`).
    public func signOut(_ user: String) async throws {
        _ = try await service.revokeSessions(userName: user)
    }

    /// Forgets the encryption keys every device of `user` made by this server holds, as a user
    /// who reset their encrypted data in iCloud's settings: encrypted fields saved before can
    /// no longer be read (`CKError.zoneNotFound` with `CKErrorUserDidResetEncryptedDataKey`).
    /// Devices made before this call keep the key in memory; make new ones to see the reset.
    public func resetEncryptionKey(of user: String) throws {
        for folder in devices.folders(user: user) {
            try? FileManager.default.removeItem(at: folder.appendingPathComponent("keys", isDirectory: true))
        }
    }
}

/// Each device's folder under the server's scratch folder, by user.
private final class DeviceFolders: @unchecked Sendable {
    private let lock = NSLock()
    private var byUser: [String: Set<String>] = [:]

    func folder(user: String, device: String, under scratch: URL) -> URL {
        let folder = scratch.appendingPathComponent("devices", isDirectory: true)
            .appendingPathComponent(Self.safe(user.isEmpty ? "anonymous" : user), isDirectory: true)
            .appendingPathComponent(Self.safe(device), isDirectory: true)
        lock.withLock { _ = byUser[user, default: []].insert(folder.path) }
        return folder
    }

    func folders(user: String) -> [URL] {
        lock.withLock { (byUser[user] ?? []).map { URL(fileURLWithPath: $0, isDirectory: true) } }
    }

    private static func safe(_ name: String) -> String {
        String(name.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : "_" })
    }
}

extension ServerConfiguration {
    /// A server for tests: SQLite in `dataDirectory`, with `applyTestDefaults()`.
    public static func forTests(dataDirectory: String) -> ServerConfiguration {
        var configuration = ServerConfiguration(storage: SQLiteStorage.opener(synchronous: .normal))
        configuration.dataDirectory = dataDirectory
        configuration.applyTestDefaults()
        return configuration
    }

    /// What a server in a test wants: a free loopback port, quiet logs, quick password
    /// hashing, and budgets high enough that one test process's requests are never refused
    /// unless a test sets them (or switches on a `throttled` fault).
    public mutating func applyTestDefaults() {
        port = 0
        logLevel = .error
        service.passwordRounds = 1_000  // fast tests; production uses 210,000
        service.signInLimits.attemptsPerAddressPerMinute = 100_000
        service.signInLimits.failuresPerAccountPerMinute = 100_000
        service.signInLimits.failuresPerAccountAndAddressPerMinute = 100_000
        for limit in ContainerLimit.allCases where !limit.isQuota { service.containerLimits[limit] = 1_000_000 }
        service.failedAuthenticationsPerMinute = 100_000
        service.passwordHashing = Self.testPasswordHashing
    }

    /// One hashing pool for every test server of the process, with room for a whole suite's
    /// sign-ins at once (a server's own pool refuses past 64 waiting).
    private static let testPasswordHashing = PasswordHashing(threads: 2, queueLimit: 1_000_000)
}

/// A test server that could not do what it was asked.
public struct NimbusTestingError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
