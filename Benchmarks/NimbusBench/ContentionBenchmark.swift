import AsyncHTTPClient
import Foundation
import NIOCore

/// Expensive requests beside cheap lookups: how much clients looping on costly work slow
/// everyone else's lookups. Loads `records` public records, then measures a one-record lookup
/// (API token only, one client) alone, and again while `slowClients` clients loop on
/// - `--against query` (the default): a query of 48 `NOT_IN` filters and one `NOT_EQUALS`
///   that no record passes, sorted by a string field: the planner must walk every record and
///   probe all 49 filters for each;
/// - `--against signin`: sign-ins with a wrong password (each a full PBKDF2 check), as a
///   password guesser sends them;
/// - `--against flood`: lookups as the signed-in user, as fast as they come back, ignoring
///   `THROTTLED` and its `retryAfter` (a runaway client); the measured lookups are then paced
///   at 8 a second, an honest client inside its own budget (issue 17: its p99 within 2× of
///   its value alone).
struct ContentionBenchmark {
    let options: Options
    var slowClients: Int { options.clients }
    /// One HTTP client for the lookups and one for the slow queries: a shared client's pool
    /// (8 connections per host) would make lookups wait for a connection, not for the server.
    let lookupClient = HTTPClient(eventLoopGroupProvider: .singleton)
    let slowClient: HTTPClient

    init(options: Options) {
        self.options = options
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(8, options.clients)
        slowClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    func seed() async throws {
        let batches = (options.records + 199) / 200
        await withTaskGroup(of: Void.self) { group in
            for client in 0..<4 {
                group.addTask {
                    for batch in stride(from: client, to: batches, by: 4) {
                        let operations = (batch * 200..<min(options.records, batch * 200 + 200)).map { index in
                            #"{"operationType":"create","record":{"recordType":"Item","recordName":"item-\#(index)","fields":{"#
                                + #""name":{"value":"name-\#(index)"},"tag":{"value":"common"},"n":{"value":\#(index)}}}}"#
                        }
                        _ = await post(options, "public/records/modify", #"{"operations":[\#(operations.joined(separator: ","))]}"#)
                    }
                }
            }
        }
    }

    static var slowQuery: String {
        var filters = (0..<48).map { index in
            #"{"comparator":"NOT_IN","fieldName":"name","fieldValue":{"value":["absent-\#(index)-a","absent-\#(index)-b"],"type":"STRING_LIST"}}"#
        }
        filters.append(#"{"comparator":"NOT_EQUALS","fieldName":"tag","fieldValue":{"value":"common"}}"#)
        return #"{"query":{"recordType":"Item","filterBy":[\#(filters.joined(separator: ","))],"#
            + #""sortBy":[{"fieldName":"name","ascending":true}]}}"#
    }

    /// POSTs with the API token only; the status code and the seconds it took.
    func request(_ path: String, _ body: String, on client: HTTPClient, session: String? = nil) async -> (status: Int, seconds: Double)? {
        var request = HTTPClientRequest(
            url: "\(options.url)/database/1/\(options.container)/\(options.environment)/\(path)?ckAPIToken=\(options.apiToken)"
                + (session.map { "&ckWebAuthToken=\($0)" } ?? ""))
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: body))
        let began = Date()
        guard let response = try? await client.execute(request, timeout: .seconds(120)),
            (try? await response.body.collect(upTo: 64 << 20)) != nil
        else { return nil }
        return (Int(response.status.code), Date().timeIntervalSince(began))
    }

    func lookups(seconds: Double) async -> Measurement {
        let body = #"{"records":[{"recordName":"item-7"}]}"#
        if options.against == "flood" { return await pacedLookups(body, seconds: seconds) }
        return await load(clients: 1, warmup: 1, seconds: seconds) {
            guard let answer = await request("public/records/lookup", body, on: lookupClient), answer.status == 200 else { return nil }
            return 1
        }
    }

    /// Lookups 125 ms apart (8 a second), each timed alone.
    func pacedLookups(_ body: String, seconds: Double) async -> Measurement {
        await paced(every: 0.125, for: seconds) { await request("public/records/lookup", body, on: lookupClient)?.status == 200 }
    }

    /// One request of the expensive kind.
    func expensive() async -> (status: Int, seconds: Double)? {
        if options.against == "flood" {
            let token = options.webAuthToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            return await request("public/records/lookup", #"{"records":[{"recordName":"item-7"}]}"#, on: slowClient, session: token)
        }
        guard options.against == "signin" else { return await request("public/records/query", Self.slowQuery, on: slowClient) }
        var request = HTTPClientRequest(
            url: "\(options.url)/auth/1/\(options.container)/\(options.environment)/signin?ckAPIToken=\(options.apiToken)")
        request.method = .POST
        // A name with no account: the server checks against a hash of its full rounds anyway (so
        // timing does not reveal names), where the benchmark's own user has cheap ones.
        request.body = .bytes(ByteBuffer(string: #"{"username":"no-such-user","password":"a-wrong-guess"}"#))
        let began = Date()
        guard let response = try? await slowClient.execute(request, timeout: .seconds(120)),
            (try? await response.body.collect(upTo: 1 << 20)) != nil
        else { return nil }
        return (Int(response.status.code), Date().timeIntervalSince(began))
    }

    func run() async throws {
        if options.loadRecords { try await seed() }
        let probe = await expensive()
        let alone = await lookups(seconds: options.seconds)
        // The slow clients loop until the measurement is over; their answers are tallied.
        let stop = ManagedFlag()
        let slow = Task {
            await withTaskGroup(of: [(Int, Double)].self) { group in
                for _ in 0..<slowClients {
                    group.addTask {
                        var answers: [(Int, Double)] = []
                        while !stop.isSet {
                            if let answer = await expensive() {
                                answers.append((answer.status, answer.seconds))
                            }
                        }
                        return answers
                    }
                }
                var all: [(Int, Double)] = []
                for await part in group { all += part }
                return all
            }
        }
        try await Task.sleep(for: .seconds(1))
        let beside = await lookups(seconds: options.seconds)
        stop.set()
        let answers = await slow.value
        let statuses = Dictionary(grouping: answers, by: \.0).mapValues(\.count)
        let slowSeconds = answers.map(\.1).sorted()
        let slowP50 = slowSeconds.isEmpty ? 0 : slowSeconds[slowSeconds.count / 2] * 1000
        print(String(format: "records %d, %d clients looping on %@; one alone: status %d in %.0f ms",
                     options.records, slowClients, options.against as NSString, probe?.status ?? 0, (probe?.seconds ?? 0) * 1000))
        print(String(format: "lookup alone:              p50 %7.2f ms  p99 %7.2f ms  %6.0f/s", alone.percentile(0.5), alone.percentile(0.99), alone.perSecond))
        print(String(format: "lookup beside them:         p50 %7.2f ms  p99 %7.2f ms  %6.0f/s", beside.percentile(0.5), beside.percentile(0.99), beside.perSecond))
        print(String(format: "the others: %d answered, statuses %@, p50 %.0f ms", answers.count,
                     statuses.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " ") as NSString, slowP50))
        print(String(format: "lookup p50 beside / alone = %.2f", beside.percentile(0.5) / max(alone.percentile(0.5), 0.001)))
        print(String(format: "lookup p99 beside / alone = %.2f (%d and %d lookups, %d and %d failed)",
                     beside.percentile(0.99) / max(alone.percentile(0.99), 0.001), alone.operations, beside.operations,
                     alone.errors, beside.errors))
        try await lookupClient.shutdown()
        try await slowClient.shutdown()
    }
}

final class ManagedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
