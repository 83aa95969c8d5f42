import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization

/// Writers of one database's zones on several nodes (`Benchmarks/zones.sh`, issue 35: order only
/// where CloudKit orders). The signed-in user's private database gets 64 zones; then, with the
/// nodes `--url` names:
/// - **different zones**: `clients` clients each create single records into zones of their
///   own; call `i` goes to node `i % nodes` and zone `i % 64`, so no zone is written from two
///   nodes. Nothing may fail: a collision between nodes that is not resolved shows as an error
///   (`TRY_AGAIN_LATER`).
/// - **one zone**: the same clients all into one zone from every node, the contrast (the zone
///   orders its writes; nodes collide there and decide again).
/// - **a quiet zone beside a flood**: one writer creating into its own zone 8 times a second,
///   alone and then while the other clients create into one busy zone as fast as answers come
///   back; its p99 beside the flood over its p99 alone (issue 35: within 2×).
struct ZonesBenchmark {
    let options: Options
    let http: HTTPClient
    /// Failed answers by what they said (a `serverErrorCode`, an HTTP status, or none at all).
    let failures = Tally()

    final class Tally: Sendable {
        private let counts = Mutex<[String: Int]>([:])
        func add(_ code: String) { counts.withLock { $0[code, default: 0] += 1 } }
        var all: [String: Int] { counts.withLock { $0 } }
    }

    init(options: Options) {
        self.options = options
        http = manyConnectionsClient()
    }

    static let zones = 64

    func url(_ node: Int, _ path: String) -> String {
        let token = options.webAuthToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        return "\(options.urls[node % options.urls.count])/database/1/\(options.container)/\(options.environment)/private/\(path)"
            + "?ckAPIToken=\(options.apiToken)&ckWebAuthToken=\(token)"
    }

    /// The answer's text when the request succeeded whole (HTTP 200, no per-item error).
    func post(_ url: String, _ body: String) async -> String? {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: body))
        guard let response = try? await http.execute(request, timeout: .seconds(60)),
            let bytes = try? await response.body.collect(upTo: 16 << 20)
        else {
            failures.add("no answer")
            return nil
        }
        let text = String(buffer: bytes)
        guard response.status == .ok, !text.contains("serverErrorCode") else {
            let code = text.firstMatch(of: /"serverErrorCode":"([A-Z_]+)"/).map { String($0.1) } ?? "HTTP \(response.status.code)"
            failures.add(code)
            return nil
        }
        return text
    }

    let runID = UUID().uuidString.prefix(6)

    func create(node: Int, zone: String, index: Int) async -> Bool {
        let record = #"{"operationType":"create","record":{"recordType":"Item","recordName":"z\#(runID)-\#(index)","fields":{"title":{"value":"item \#(index)","type":"STRING"},"count":{"value":\#(index),"type":"INT64"}}}}"#
        return await post(url(node, "records/modify"), #"{"zoneID":{"zoneName":"\#(zone)"},"operations":[\#(record)]}"#) != nil
    }

    func makeZones() async throws {
        let operations = ((0..<Self.zones).map { "Z\($0)" } + ["Quiet"]).map {
            #"{"operationType":"create","zone":{"zoneID":{"zoneName":"\#($0)"}}}"#
        }
        guard await post(url(0, "zones/modify"), #"{"operations":[\#(operations.joined(separator: ","))]}"#) != nil else {
            throw BenchmarkFailure("could not make the zones")
        }
    }

    struct BenchmarkFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// The quiet zone's writer: one create every 125 ms on node 0, each timed alone.
    func quietWrites(seconds: Double) async -> Measurement {
        let counter = Comparison.sequence
        return await paced(every: 0.125, for: seconds) { await create(node: 0, zone: "Quiet", index: counter.next()) }
    }

    func run() async throws {
        try await makeZones()
        let counter = Comparison.sequence
        let nodes = options.urls.count
        func line(_ name: String, _ m: Measurement) {
            print(String(format: "| %@ | %.0f | %.2f | %.2f | %d |", name as NSString, m.perSecond, m.percentile(0.5), m.percentile(0.99), m.errors))
        }
        print("Writers of one database's zones, \(nodes) node(s), \(options.clients) clients, \(options.seconds) s windows after \(options.warmup) s warm-up\n")
        print("| scenario | creates/s | p50 ms | p99 ms | failed |\n|---|---|---|---|---|")
        let different = await load(clients: options.clients, warmup: options.warmup, seconds: options.seconds) {
            let index = counter.next()
            return await create(node: index, zone: "Z\(index % Self.zones)", index: index) ? 1 : nil
        }
        line("\(options.clients) clients, each call into zone i % 64 on node i % \(nodes) (no zone on two nodes)", different)
        let one = await load(clients: options.clients, warmup: options.warmup, seconds: options.seconds) {
            let index = counter.next()
            return await create(node: index, zone: "Z0", index: index) ? 1 : nil
        }
        line("\(options.clients) clients into one zone from every node", one)

        let alone = await quietWrites(seconds: options.seconds)
        line("quiet zone, 8 creates a second, alone", alone)
        // The flood warms up for a second, then both are measured over the same window.
        let flood = Task {
            await load(clients: options.clients - 1, warmup: 1, seconds: options.seconds) {
                let index = counter.next()
                return await create(node: index, zone: "Z1", index: index) ? 1 : nil
            }
        }
        try await Task.sleep(for: .seconds(1))
        let beside = await quietWrites(seconds: options.seconds)
        let flooded = await flood.value
        line("quiet zone, 8 creates a second, beside the flood", beside)
        line("the flood: \(options.clients - 1) clients into one zone from every node", flooded)
        let failed = failures.all
        if !failed.isEmpty {
            print("\nfailed answers by code: " + failed.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        print(String(format: "\nquiet zone p99 beside the flood / alone = %.2f (p50 %.2f)",
                     beside.percentile(0.99) / max(alone.percentile(0.99), 0.001), beside.percentile(0.5) / max(alone.percentile(0.5), 0.001)))
        try await http.shutdown()
    }
}
