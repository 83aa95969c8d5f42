import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NimbusCore
import NimbusPostgres
import NimbusSQLite
import NimbusServer
import NimbusStorage
import NimbusTesting
import NimbusWire
import ServiceLifecycle

/// A Nimbus server on a fresh data directory, listening on a free loopback port, for
/// scenario tests over real HTTP. Use `TestServer.with { server in … }`: it always stops.
public final class TestServer: Sendable {
    public static let container = "iCloud.test.nimbus"

    public let port: Int
    public let directory: DataDirectory
    public let dataDirectory: String
    public let developmentToken: String
    public let productionToken: String
    public let clock: ManualClock
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    public var service: NimbusService { directory.service }
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private init(
        port: Int, directory: DataDirectory, dataDirectory: String, developmentToken: String, productionToken: String,
        clock: ManualClock, group: ServiceGroup, task: Task<Void, any Error>
    ) {
        self.port = port
        self.directory = directory
        self.dataDirectory = dataDirectory
        self.developmentToken = developmentToken
        self.productionToken = productionToken
        self.clock = clock
        self.group = group
        self.task = task
    }

    public static func start(configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> TestServer {
        let dataDirectory = NSTemporaryDirectory() + "nimbus-test-" + UUID().uuidString
        var configuration = ServerConfiguration.embedded()
        configuration.dataDirectory = dataDirectory
        configuration.applyTestDefaults()
        let clock = ManualClock(milliseconds: Int64(Date().timeIntervalSince1970 * 1000))
        configuration.service.clock = clock
        configure(&configuration)
        let directory = try await DataDirectory.open(configuration)
        if try await !directory.service.containers().contains(where: { $0.id == container }) {
            try await directory.service.createContainer(id: container)
        }
        let developmentToken = try await directory.service.createAPIToken(container: container, environment: .development)
        let productionToken = try await directory.service.createAPIToken(container: container, environment: .production)

        let (ports, portContinuation) = AsyncStream<Int>.makeStream()
        let app = NimbusServer.makeApplication(directory: directory, configuration: configuration) { port in
            portContinuation.yield(port)
            portContinuation.finish()
        }
        let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw TestFailure("the server did not start") }
        return TestServer(
            port: port, directory: directory, dataDirectory: dataDirectory, developmentToken: developmentToken,
            productionToken: productionToken, clock: clock, group: group, task: task)
    }

    public func stop() async throws {
        try await shutDown()
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }

    /// Stops this server and leaves its data for another (a second node on the same store).
    public func shutDownKeepingData() async throws { try await shutDown() }

    private func shutDown() async throws {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
        try await directory.storage.close()
    }

    /// Stops this server and starts a new one on the same data directory and port, as after
    /// a restart: sessions and data survive; open connections do not.
    /// `whileStopped` runs between the two with the data directory's path (to alter the files
    /// as an older version or a crash would have left them).
    public func restarted(whileStopped: (String) async throws -> Void = { _ in }) async throws -> TestServer {
        try await shutDown()
        try await whileStopped(dataDirectory)
        let (dataDirectory, port) = (self.dataDirectory, self.port)
        return try await Self.start { configuration in
            configuration.dataDirectory = dataDirectory
            configuration.port = port
        }
    }

    /// Runs `body` against a fresh server and stops it afterwards, also when `body` throws.
    public static func with<T>(
        configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (TestServer) async throws -> T
    ) async throws -> T {
        let server = try await start(configure: configure)
        do {
            let result = try await body(server)
            try await server.stop()
            return result
        } catch {
            try? await server.stop()
            throw error
        }
    }

    /// Creates a user and signs them in; returns a client acting as them.
    public func user(_ name: String, environment: NimbusStorage.Environment = .development) async throws -> APIClient {
        _ = try await service.createUser(name: name, password: "password-\(name)")
        let anonymous = client(environment: environment)
        let response = try await anonymous.signIn(name, password: "password-\(name)")
        guard response.status == 200, let token = response.json["ckWebAuthToken"]?.stringValue,
            let recordName = response.json["userRecordName"]?.stringValue
        else { throw TestFailure("sign-in failed: \(response.text)") }
        return APIClient(
            baseURL: baseURL, container: Self.container, environment: environment,
            apiToken: environment == .development ? developmentToken : productionToken, webAuthToken: token,
            userRecordName: recordName)
    }

    /// A client with the API token only (no user).
    public func client(environment: NimbusStorage.Environment = .development) -> APIClient {
        APIClient(
            baseURL: baseURL, container: Self.container, environment: environment,
            apiToken: environment == .development ? developmentToken : productionToken, webAuthToken: nil,
            userRecordName: nil)
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// One HTTP answer: status, headers and the body parsed as JSON.
public struct APIResponse: Sendable {
    public let status: Int
    public let headers: [(String, String)]
    public let text: String
    public let json: JSON

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    /// The `serverErrorCode` of a whole-request error.
    public var errorCode: String? { json["serverErrorCode"]?.stringValue }
    public var reason: String { json["reason"]?.stringValue ?? "" }
    public var records: [JSON] { json["records"]?.arrayValue ?? [] }
    public var zones: [JSON] { json["zones"]?.arrayValue ?? [] }
}

/// Speaks the Web Services protocol over real HTTP, as a CloudKit JS client would.
public struct APIClient: Sendable {
    public let baseURL: String
    public let container: String
    public let environment: NimbusStorage.Environment
    public var apiToken: String?
    public var webAuthToken: String?
    public let userRecordName: String?
    /// How long one request may take before it fails.
    public var timeoutSeconds: Int64 = 60
    /// Sent as `X-Nimbus-Device-ID`: the device this client speaks for.
    public var deviceID: String?

    public init(
        baseURL: String, container: String, environment: NimbusStorage.Environment, apiToken: String?,
        webAuthToken: String?, userRecordName: String?
    ) {
        self.baseURL = baseURL
        self.container = container
        self.environment = environment
        self.apiToken = apiToken
        self.webAuthToken = webAuthToken
        self.userRecordName = userRecordName
    }

    var query: String {
        var parts: [String] = []
        if let apiToken { parts.append("ckAPIToken=\(apiToken)") }
        if let webAuthToken { parts.append("ckWebAuthToken=\(webAuthToken)") }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }

    /// POSTs to `/database/1/{container}/{environment}/{database}/{endpoint}`.
    public func post(_ database: String, _ endpoint: String, _ body: JSON) async throws -> APIResponse {
        try await send(
            path: "/database/1/\(container)/\(environment.rawValue)/\(database)/\(endpoint)", body: Array(body.serialized()))
    }

    /// POSTs to `/device/1/{container}/{environment}/{endpoint}`.
    public func device(_ endpoint: String, _ body: JSON = [:]) async throws -> APIResponse {
        try await send(path: "/device/1/\(container)/\(environment.rawValue)/\(endpoint)", body: Array(body.serialized()))
    }

    /// This client acting as another of its user's devices.
    public func onDevice(_ deviceID: String) -> APIClient {
        var copy = self
        copy.deviceID = deviceID
        return copy
    }

    public func get(_ database: String, _ endpoint: String) async throws -> APIResponse {
        try await send(path: "/database/1/\(container)/\(environment.rawValue)/\(database)/\(endpoint)", body: nil)
    }

    public func signIn(_ user: String, password: String) async throws -> APIResponse {
        try await send(
            path: "/auth/1/\(container)/\(environment.rawValue)/signin",
            body: Array(JSON.object(["username": .string(user), "password": .string(password)]).serialized()))
    }

    /// `method`: GET without a body, POST with one, unless it says otherwise (a GET with a body).
    public func send(path: String, body: [UInt8]?, rawQuery: String? = nil, headers: [(String, String)] = [], method: String? = nil)
        async throws -> APIResponse
    {
        var request = HTTPClientRequest(url: baseURL + path + (rawQuery ?? query))
        request.method = method.map { HTTPMethod(rawValue: $0) } ?? (body == nil ? .GET : .POST)
        request.headers.add(name: "Content-Type", value: "text/plain")
        if let deviceID { request.headers.add(name: "X-Nimbus-Device-ID", value: deviceID) }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(timeoutSeconds))
        let buffer = try await response.body.collect(upTo: 64 * 1_048_576)
        let bytes = Array(buffer.readableBytesView)
        let json = (try? JSON.parse(bytes)) ?? .null
        return APIResponse(
            status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
            text: String(decoding: bytes, as: UTF8.self), json: json)
    }

    // MARK: Shorthands

    public func modify(zone: String? = nil, atomic: Bool? = nil, _ operations: [JSON], extra: JSONObject = [:])
        async throws -> APIResponse
    {
        try await modify("private", zone: zone, atomic: atomic, operations, extra: extra)
    }

    public func modify(_ database: String, zone: String? = nil, atomic: Bool? = nil, _ operations: [JSON],
        extra: JSONObject = [:]) async throws -> APIResponse
    {
        var body = extra
        body["operations"] = .array(operations)
        if let zone { body["zoneID"] = .object(["zoneName": .string(zone)]) }
        if let atomic { body["atomic"] = .bool(atomic) }
        return try await post(database, "records/modify", .object(body))
    }

    public func lookup(zone: String? = nil, _ names: [String], extra: JSONObject = [:]) async throws -> APIResponse {
        try await lookup("private", zone: zone, names, extra: extra)
    }

    public func lookup(_ database: String, zone: String? = nil, _ names: [String], extra: JSONObject = [:])
        async throws -> APIResponse
    {
        var body = extra
        body["records"] = .array(names.map { .object(["recordName": .string($0)]) })
        if let zone { body["zoneID"] = .object(["zoneName": .string(zone)]) }
        return try await post(database, "records/lookup", .object(body))
    }

    public func createZone(_ name: String) async throws -> APIResponse {
        try await post(
            "private", "zones/modify",
            ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": .string(name)]]]]])
    }

    public func deleteZone(_ name: String) async throws -> APIResponse {
        try await post(
            "private", "zones/modify",
            ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": .string(name)]]]]])
    }

    public func zoneChanges(_ zone: String, token: String? = nil, limit: Int? = nil) async throws -> APIResponse {
        var zoneRequest: JSONObject = ["zoneID": ["zoneName": .string(zone)]]
        if let token { zoneRequest["syncToken"] = .string(token) }
        if let limit { zoneRequest["resultsLimit"] = .int(Int64(limit)) }
        return try await post("private", "changes/zone", ["zones": [.object(zoneRequest)]])
    }

    public func databaseChanges(token: String? = nil, limit: Int? = nil) async throws -> APIResponse {
        var body: JSONObject = [:]
        if let token { body["syncToken"] = .string(token) }
        if let limit { body["resultsLimit"] = .int(Int64(limit)) }
        return try await post("private", "changes/database", .object(body))
    }
}

/// Builders for operation dictionaries.
public enum Op {
    public static func record(
        _ name: String?, type: String? = "Note", tag: String? = nil, fields: JSONObject? = nil
    ) -> JSON {
        var record: JSONObject = [:]
        if let name { record["recordName"] = .string(name) }
        if let type { record["recordType"] = .string(type) }
        if let tag { record["recordChangeTag"] = .string(tag) }
        if let fields { record["fields"] = .object(fields) }
        return .object(record)
    }

    public static func make(_ type: String, _ record: JSON, desiredKeys: [String]? = nil) -> JSON {
        var operation: JSONObject = ["operationType": .string(type), "record": record]
        if let desiredKeys { operation["desiredKeys"] = .array(desiredKeys.map { .string($0) }) }
        return .object(operation)
    }

    public static func create(_ name: String?, type: String = "Note", _ fields: JSONObject = [:]) -> JSON {
        make("create", record(name, type: type, fields: fields))
    }

    public static func update(_ name: String, tag: String?, _ fields: JSONObject) -> JSON {
        make("update", record(name, type: nil, tag: tag, fields: fields))
    }

    public static func delete(_ name: String, tag: String?) -> JSON {
        make("delete", record(name, type: nil, tag: tag))
    }

    public static func forceDelete(_ name: String) -> JSON { make("forceDelete", record(name, type: nil)) }

    /// `{"value": …}` with an optional type.
    public static func field(_ value: JSON, _ type: String? = nil) -> JSON {
        var field: JSONObject = ["value": value]
        if let type { field["type"] = .string(type) }
        return .object(field)
    }
}

extension JSON {
    /// An array's element, or nil (tests read `json["subscriptions"]?[0]`).
    public subscript(index: Int) -> JSON? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }

    /// The value of a record dictionary's field.
    public func fieldValue(_ name: String) -> JSON? { self["fields"]?[name]?["value"] }
    public var changeTag: String? { self["recordChangeTag"]?.stringValue }
    public var errorCode: String? { self["serverErrorCode"]?.stringValue }
}

/// Which engine the server tests run on (`NIMBUS_TEST_STORAGE`, see `embedded()`).
public enum TestStorage {
    public static var name: String { ProcessInfo.processInfo.environment["NIMBUS_TEST_STORAGE"] ?? "sqlite" }
    /// Whether the data directory holds a SQLite file the test may open itself.
    public static var isSQLiteFile: Bool { name != "postgres" }
}

extension ServerConfiguration {
    /// SQLite in the data directory with synchronous=NORMAL (crash-safe; tests need no more).
    /// `NIMBUS_TEST_STORAGE` runs the same tests on another engine:
    /// - `units`: the same SQLite behind `UnitOfWorkDriver` (every transaction closure runs as
    ///   a unit of work over loaded rows, as on PostgreSQL);
    /// - `postgres`: PostgreSQL on the private test cluster (`NIMBUS_TEST_POSTGRES`), one
    ///   database per data directory, so a server restarted on the same directory finds its
    ///   data again, and two servers given one directory share it (as two nodes do).
    public static func embedded() -> ServerConfiguration {
        let sqlite = SQLiteStorage.opener(synchronous: .normal)
        switch ProcessInfo.processInfo.environment["NIMBUS_TEST_STORAGE"] {
        case "units":
            return ServerConfiguration(
                storage: StorageOpener(
                    description: { "round trips to " + sqlite.description($0) },
                    open: { directory in
                        guard let embedded = try await sqlite.open(directory) as? UnitOfWorkDriver else { throw TestFailure("not SQLite") }
                        return UnitOfWorkDriver(RoundTrips(embedded.base), checksPurity: true)
                    }))
        case "postgres":
            var configuration = ServerConfiguration(storage: PostgresTestCluster.opener())
            // On PostgreSQL the query budget is the statement's elapsed time on the server
            // (statement_timeout), and the suite's parallel tests share two cores with it: a
            // 30 ms query can take 300, and a sort-driven page over 4,400 records took over 2 s
            // beside the role matrix. The budget's own test sets its own.
            configuration.service.queryBudget = .seconds(10)
            return configuration
        default:
            return ServerConfiguration(storage: sqlite)
        }
    }
}
