// Load generator for Nimbus benchmarks (run by Benchmarks/run.sh; never part of the tests).
//
// Measures, in one run:
//   - single-record saves/s over HTTP with N concurrent clients (records/modify, one create each);
//   - records/s for 200-record atomic batch saves into a custom zone;
//   - raw SQLite single-row commits/s (WAL, same synchronous mode), the ceiling.
// Prints a table and writes JSON.

import AsyncHTTPClient
import Foundation
import GRDB
import NIOCore

struct Options {
    var url = "http://127.0.0.1:8080"
    /// Every node `--url` named (comma-separated); `url` is the first. The comparison splits its
    /// clients between them; the notification benchmark listens on the last.
    var urls = ["http://127.0.0.1:8080"]
    var container = "iCloud.bench.nimbus"
    var apiToken = ""
    var webAuthToken = ""
    var clients = 64
    var seconds = 10.0
    var warmup = 2.0
    var synchronous = "FULL"
    var output = "bench-results/server-core.json"
    var rawDirectory = NSTemporaryDirectory()
    /// `write` (saves and batches) or `query` (load `records`, then time queries).
    var scenario = "write"
    var records = 1_000_000
    /// `contention`: what the other clients loop on, `query` (the slow query) or `signin`
    /// (wrong passwords).
    var against = "query"
    var samples = 300
    /// false: query a data directory loaded before (`--load false`).
    var loadRecords = true
    /// `compare`: PocketBase's base URL (empty: Nimbus only), rounds per cell, records behind
    /// the fetch and list scenarios, and whether to run the write scenarios only.
    var pocketBaseURL = ""
    var rounds = 3
    var listRecords = 100_000
    var writesOnly = false
    /// Runs only the rows whose name contains this (for profiling one scenario).
    var only = ""
    /// `notify`: idle WebSocket clients, the user they sign in as, and the server's process ID
    /// (for its resident memory).
    var idle = 10_000
    var idleUser = "idle"
    var idlePassword = "idle-password"
    var serverPID = 0
    /// `compare`: the environment Nimbus's scenarios run in (`lib.sh` prepares production with
    /// the indexes PocketBase's collection has).
    var environment = "development"
}

func parseOptions() -> Options {
    var options = Options()
    var arguments = CommandLine.arguments.dropFirst().makeIterator()
    while let flag = arguments.next() {
        guard let value = arguments.next() else { break }
        switch flag {
        case "--url":
            options.urls = value.split(separator: ",").map(String.init)
            options.url = options.urls.first ?? value
        case "--container": options.container = value
        case "--api-token": options.apiToken = value
        case "--web-auth-token": options.webAuthToken = value
        case "--clients": options.clients = Int(value) ?? options.clients
        case "--seconds": options.seconds = Double(value) ?? options.seconds
        case "--warmup": options.warmup = Double(value) ?? options.warmup
        case "--sync": options.synchronous = value.uppercased()
        case "--output": options.output = value
        case "--raw-dir": options.rawDirectory = value
        case "--scenario": options.scenario = value
        case "--records": options.records = Int(value) ?? options.records
        case "--against": options.against = value
        case "--samples": options.samples = Int(value) ?? options.samples
        case "--load": options.loadRecords = value != "false"
        case "--pocketbase-url": options.pocketBaseURL = value
        case "--rounds": options.rounds = Int(value) ?? options.rounds
        case "--list-records": options.listRecords = Int(value) ?? options.listRecords
        case "--writes-only": options.writesOnly = value == "true"
        case "--only": options.only = value
        case "--idle": options.idle = Int(value) ?? options.idle
        case "--idle-user": options.idleUser = value
        case "--idle-password": options.idlePassword = value
        case "--server-pid": options.serverPID = Int(value) ?? 0
        case "--environment": options.environment = value
        default: FileHandle.standardError.write(Data("unknown flag \(flag)\n".utf8))
        }
    }
    return options
}

/// Latencies and a count over a measured window.
struct Measurement {
    var operations = 0
    var latencies: [Double] = []
    var errors = 0
    var seconds = 0.0

    var perSecond: Double { Double(operations) / seconds }

    func percentile(_ p: Double) -> Double {
        guard !latencies.isEmpty else { return 0 }
        let sorted = latencies.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func next() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
}

/// Runs `clients` loops of `body` for warm-up plus the measured window; `body` returns how
/// many operations (records) one call did, or nil on failure.
func load(clients: Int, warmup: Double, seconds: Double, _ body: @escaping @Sendable () async -> Int?) async -> Measurement {
    let start = Date()
    let measureFrom = start.addingTimeInterval(warmup)
    let end = measureFrom.addingTimeInterval(seconds)
    return await withTaskGroup(of: Measurement.self) { group in
        for _ in 0..<clients {
            group.addTask {
                var local = Measurement()
                while Date() < end {
                    let began = Date()
                    let done = await body()
                    let finished = Date()
                    guard began >= measureFrom, finished <= end else { continue }
                    if let done {
                        local.operations += done
                        local.latencies.append(finished.timeIntervalSince(began))
                    } else {
                        local.errors += 1
                    }
                }
                return local
            }
        }
        var total = Measurement()
        for await part in group {
            total.operations += part.operations
            total.latencies += part.latencies
            total.errors += part.errors
        }
        total.seconds = seconds
        return total
    }
}

/// An HTTP client with a connection per client, up to 128: the default pool (8 per host) would
/// cap concurrency.
func manyConnectionsClient() -> HTTPClient {
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 128)
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}

/// Calls `body` every `interval` seconds for `seconds`, each call timed alone (an honest client
/// inside its budget, beside others that are not); `body` says whether the call succeeded.
func paced(every interval: Double, for seconds: Double, _ body: () async -> Bool) async -> Measurement {
    var measurement = Measurement()
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        let began = Date()
        if await body() {
            measurement.operations += 1
            measurement.latencies.append(Date().timeIntervalSince(began))
        } else {
            measurement.errors += 1
        }
        let rest = interval - Date().timeIntervalSince(began)
        if rest > 0 { try? await Task.sleep(for: .seconds(rest)) }
    }
    measurement.seconds = seconds
    return measurement
}

func post(_ options: Options, _ path: String, _ body: String) async -> Bool {
    var request = HTTPClientRequest(
        url: "\(options.url)/database/1/\(options.container)/\(options.environment)/\(path)?ckAPIToken=\(options.apiToken)&ckWebAuthToken=\(options.webAuthToken)")
    request.method = .POST
    request.body = .bytes(ByteBuffer(string: body))
    guard let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(30)),
        let bytes = try? await response.body.collect(upTo: 64 << 20)
    else { return false }
    return response.status == .ok && !String(buffer: bytes).contains("serverErrorCode")
}

func recordJSON(_ name: String, _ index: Int) -> String {
    #"{"operationType":"create","record":{"recordType":"Item","recordName":"\#(name)","fields":{"title":{"value":"item \#(index)"},"count":{"value":\#(index)},"score":{"value":\#(Double(index) / 7)}}}}"#
}

func rawSQLiteCommits(options: Options, seconds: Double) throws -> Measurement {
    let path = (options.rawDirectory as NSString).appendingPathComponent("raw-\(UUID().uuidString).sqlite")
    defer {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }
    let queue = try DatabaseQueue(path: path)
    try queue.writeWithoutTransaction { db in
        try db.execute(sql: "PRAGMA journal_mode = WAL")
        try db.execute(sql: "PRAGMA synchronous = \(options.synchronous)")
        try db.execute(sql: "CREATE TABLE items (zone_id INTEGER, name TEXT, fields BLOB, seq INTEGER, UNIQUE(zone_id, name))")
    }
    let payload = Data(#"{"title":{"value":"item","type":"STRING"},"count":{"value":1,"type":"INT64"}}"#.utf8)
    var measurement = Measurement()
    let end = Date().addingTimeInterval(seconds)
    var index = 0
    try queue.writeWithoutTransaction { db in
        let insert = try db.makeStatement(sql: "INSERT INTO items VALUES (1, ?, ?, ?)")
        while Date() < end {
            let began = Date()
            try db.inTransaction {
                index += 1
                try insert.execute(arguments: ["r\(index)", payload, index])
                return .commit
            }
            measurement.latencies.append(Date().timeIntervalSince(began))
            measurement.operations += 1
        }
    }
    measurement.seconds = seconds
    return measurement
}

let options = parseOptions()
let counter = Counter()
let runID = UUID().uuidString.prefix(8)

if options.scenario == "testing-startup" {
    try await TestingStartupBenchmark(options: options).run()
    exit(0)
}

if options.scenario == "compare" {
    try await Comparison(options: options).run()
    exit(0)
}

if options.scenario == "matching" {
    try await NotificationBenchmark(options: options).runMatching()
    exit(0)
}

if options.scenario == "notify" {
    try await NotificationBenchmark(options: options).runNotify()
    try await HTTPClient.shared.shutdown()
    exit(0)
}

if options.scenario == "statements" {
    try await StatementsBenchmark(options: options).run()
    exit(0)
}

if options.scenario == "contention" {
    try await ContentionBenchmark(options: options).run()
    try await HTTPClient.shared.shutdown()
    exit(0)
}

if options.scenario == "zones" {
    try await ZonesBenchmark(options: options).run()
    exit(0)
}

if options.scenario == "query" {
    try await QueryBenchmark(options: options).run()
    try await HTTPClient.shared.shutdown()
    exit(0)
}

print("Nimbus server-core benchmark: \(options.clients) clients, \(options.seconds)s per scenario, synchronous=\(options.synchronous)")
let single = await load(clients: options.clients, warmup: options.warmup, seconds: options.seconds) {
    let index = counter.next()
    let operation = recordJSON("s-\(runID)-\(index)", index)
    let ok = await post(options, "public/records/modify", #"{"operations":[\#(operation)]}"#)
    return ok ? 1 : nil
}
// The same save carrying an operationID (NimbusKit sends one with every modify): the server
// claims the ID before applying and keeps the answer after, two writes more per request.
let singleWithID = await load(clients: options.clients, warmup: options.warmup, seconds: options.seconds) {
    let index = counter.next()
    let operation = recordJSON("o-\(runID)-\(index)", index)
    let ok = await post(options, "public/records/modify", #"{"operationID":"op-\#(runID)-\#(index)","operations":[\#(operation)]}"#)
    return ok ? 1 : nil
}
let batchClients = 4
let batch = await load(clients: batchClients, warmup: options.warmup, seconds: options.seconds) {
    let base = counter.next()
    let operations = (0..<200).map { recordJSON("b-\(runID)-\(base)-\($0)", $0) }.joined(separator: ",")
    let ok = await post(options, "private/records/modify", #"{"zoneID":{"zoneName":"Bench"},"operations":[\#(operations)]}"#)
    return ok ? 200 : nil
}
let raw = try rawSQLiteCommits(options: options, seconds: options.seconds)

func row(_ name: String, _ m: Measurement, unit: String) -> String {
    String(format: "%-44@ %12.0f %-10@ p50 %7.2f ms  p99 %7.2f ms  errors %d", name as NSString, m.perSecond, unit as NSString, m.percentile(0.5), m.percentile(0.99), m.errors)
}
print(row("single-record save, \(options.clients) clients (HTTP)", single, unit: "saves/s"))
print(row("single-record save + operationID, \(options.clients) cl.", singleWithID, unit: "saves/s"))
print(row("200-record batch, \(batchClients) clients (HTTP)", batch, unit: "records/s"))
print(row("raw SQLite single-row commits (1 writer)", raw, unit: "commits/s"))
let ratio = single.perSecond / raw.perSecond
print(String(format: "Nimbus single saves / raw SQLite commits = %.2f", ratio))
print(String(format: "single saves with operationID / without = %.2f", singleWithID.perSecond / single.perSecond))

let json: [String: Any] = [
    "synchronous": options.synchronous, "clients": options.clients, "seconds": options.seconds,
    "singleSavesPerSecond": single.perSecond, "singleP50ms": single.percentile(0.5), "singleP99ms": single.percentile(0.99),
    "singleErrors": single.errors,
    "singleWithOperationIDSavesPerSecond": singleWithID.perSecond, "singleWithOperationIDP50ms": singleWithID.percentile(0.5),
    "singleWithOperationIDP99ms": singleWithID.percentile(0.99), "singleWithOperationIDErrors": singleWithID.errors,
    "batchRecordsPerSecond": batch.perSecond, "batchP50ms": batch.percentile(0.5), "batchP99ms": batch.percentile(0.99),
    "batchErrors": batch.errors,
    "rawSQLiteCommitsPerSecond": raw.perSecond, "singleOverRaw": ratio,
]
try FileManager.default.createDirectory(
    atPath: (options.output as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
try JSONSerialization.data(withJSONObject: json, options: [.prettyPrinted, .sortedKeys])
    .write(to: URL(fileURLWithPath: options.output))
try await HTTPClient.shared.shutdown()
