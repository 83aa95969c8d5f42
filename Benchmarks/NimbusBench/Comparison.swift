import AsyncHTTPClient
import Foundation
import GRDB
import NIOCore
import NIOHTTP1

/// The head-to-head benchmark (`Benchmarks/compare.sh`): the same scenarios, the same load
/// generator and the same concurrency against Nimbus and PocketBase, with raw SQLite as the
/// ceiling. Each cell is the median of `rounds` measured windows after one warm-up.
struct Comparison {
    let options: Options
    let http: HTTPClient

    init(options: Options) {
        self.options = options
        http = manyConnectionsClient()
    }

    // MARK: Systems under test

    /// One system: how it creates, fetches, batches, lists and loads the same records.
    struct System: Sendable {
        let name: String
        let create: @Sendable (Int) async -> Bool
        let fetch: @Sendable (Int) async -> Bool
        let batch: @Sendable (Int) async -> Bool
        let list: @Sendable (Int) async -> Bool
        /// Loads records `range` for lists (and fetches), 200 per request.
        let load: @Sendable (Range<Int>) async -> Bool
    }

    /// The record every scenario writes: four fields, about 100 bytes.
    static func fields(_ index: Int) -> (title: String, category: String, count: Int, score: Double) {
        ("item \(index) of the benchmark", "c\(index % 100)", index, Double(index) / 7)
    }

    func send(_ method: HTTPMethod, _ url: String, _ body: String?, headers: [(String, String)] = []) async -> String? {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Content-Type", value: "application/json")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        guard let response = try? await http.execute(request, timeout: .seconds(60)),
            let bytes = try? await response.body.collect(upTo: 256 << 20), response.status == .ok
        else { return nil }
        return String(buffer: bytes)
    }

    func nimbus() -> System {
        let loaded = options.listRecords
        // `--url` may name several nodes (comma-separated): call `index` goes to node
        // `index % count`, so the clients split evenly between them.
        let bases = options.urls.map { "\($0)/database/1/\(options.container)/\(options.environment)" }
        @Sendable func base(_ index: Int) -> String { bases[index % bases.count] }
        let auth = "ckAPIToken=\(options.apiToken)&ckWebAuthToken=\(options.webAuthToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
        let runID = UUID().uuidString.prefix(6)
        // Typed, as CloudKit JS sends them: a whole-valued score (0.0) would otherwise read as INT64.
        @Sendable func record(_ name: String, _ index: Int) -> String {
            let f = Self.fields(index)
            return #"{"operationType":"create","record":{"recordType":"Item","recordName":"\#(name)","fields":{"title":{"value":"\#(f.title)","type":"STRING"},"category":{"value":"\#(f.category)","type":"STRING"},"count":{"value":\#(f.count),"type":"INT64"},"score":{"value":\#(f.score),"type":"DOUBLE"}}}}"#
        }
        @Sendable func ok(_ text: String?) -> Bool { text.map { !$0.contains("serverErrorCode") } ?? false }
        let zone = #""zoneID":{"zoneName":"Bench"}"#
        return System(
            name: "Nimbus",
            create: { index in
                ok(await send(.POST, "\(base(index))/public/records/modify?\(auth)", #"{"operations":[\#(record("c\(runID)-\(index)", index))]}"#))
            },
            fetch: { index in
                ok(await send(.POST, "\(base(index))/private/records/lookup?\(auth)", #"{\#(zone),"records":[{"recordName":"l\#(index % loaded)"}]}"#))
            },
            batch: { index in
                let operations = (0..<200).map { record("b\(runID)-\(index)-\($0)", $0) }.joined(separator: ",")
                return ok(await send(.POST, "\(base(index))/private/records/modify?\(auth)", #"{\#(zone),"operations":[\#(operations)]}"#))
            },
            list: { index in
                ok(await send(
                    .POST, "\(base(index))/private/records/query?\(auth)",
                    #"{\#(zone),"resultsLimit":20,"query":{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"category","fieldValue":{"value":"c\#(index % 100)"}}],"sortBy":[{"fieldName":"count","ascending":false}]}}"#))
            },
            load: { range in
                let operations = range.map { record("l\($0)", $0) }.joined(separator: ",")
                return ok(await send(.POST, "\(base(range.lowerBound / 200))/private/records/modify?\(auth)", #"{\#(zone),"operations":[\#(operations)]}"#))
            })
    }

    func pocketBase(ids: IDs) -> System {
        let loaded = options.listRecords
        let base = options.pocketBaseURL
        @Sendable func body(_ index: Int) -> String {
            let f = Self.fields(index)
            return #"{"title":"\#(f.title)","category":"\#(f.category)","count":\#(f.count),"score":\#(f.score)}"#
        }
        return System(
            name: "PocketBase",
            create: { index in await send(.POST, "\(base)/api/collections/items/records", body(index)) != nil },
            fetch: { index in
                guard let id = ids.id(index % loaded) else { return false }
                return await send(.GET, "\(base)/api/collections/items/records/\(id)", nil) != nil
            },
            batch: { index in
                let requests = (0..<200).map { #"{"method":"POST","url":"/api/collections/items/records","body":\#(body($0))}"# }
                return await send(.POST, "\(base)/api/batch", #"{"requests":[\#(requests.joined(separator: ","))]}"#) != nil
            },
            list: { index in
                let filter = "(category='c\(index % 100)')".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                return await send(.GET, "\(base)/api/collections/items/records?filter=\(filter)&sort=-count&perPage=20&skipTotal=1", nil) != nil
            },
            load: { range in
                let requests = range.map { #"{"method":"POST","url":"/api/collections/items/records","body":\#(body($0))}"# }
                guard let answer = await send(.POST, "\(base)/api/batch", #"{"requests":[\#(requests.joined(separator: ","))]}"#),
                    let results = try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [[String: Any]]
                else { return false }
                for (index, result) in zip(range, results) {
                    if let id = (result["body"] as? [String: Any])?["id"] as? String { ids.set(index, id) }
                }
                return true
            })
    }

    /// PocketBase makes its own record IDs; fetches look them up here.
    final class IDs: @unchecked Sendable {
        private let lock = NSLock()
        private var ids: [Int: String] = [:]
        func set(_ index: Int, _ id: String) { lock.withLock { ids[index] = id } }
        func id(_ index: Int) -> String? { lock.withLock { ids[index] } }
    }

    // MARK: Measuring

    /// Throughput and latency of one scenario: medians over the rounds.
    struct Cell: Sendable {
        var perSecond = 0.0, p50 = 0.0, p99 = 0.0, errors = 0
        var json: [String: Any] { ["perSecond": perSecond, "p50ms": p50, "p99ms": p99, "errors": errors] }
    }

    /// Numbers every call of the run, so names made from it never repeat across scenarios.
    static let sequence = Counter()

    func measure(clients: Int, perCall: Int = 1, _ body: @escaping @Sendable (Int) async -> Bool) async -> Cell {
        let counter = Self.sequence
        var rounds: [Measurement] = []
        for round in 0..<options.rounds {
            rounds.append(
                await load(clients: clients, warmup: round == 0 ? options.warmup : 0, seconds: options.seconds) {
                    await body(counter.next()) ? perCall : nil
                })
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        return Cell(
            perSecond: median(rounds.map(\.perSecond)), p50: median(rounds.map { $0.percentile(0.5) }),
            p99: median(rounds.map { $0.percentile(0.99) }), errors: rounds.map(\.errors).reduce(0, +))
    }

    /// Loads records 0..<count into a system, 200 per request, 4 requests at a time.
    func preload(_ system: System, count: Int) async -> Double {
        let started = Date()
        let batches = Counter()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    while true {
                        let batch = batches.next() - 1
                        if batch * 200 >= count { return }
                        let range = (batch * 200)..<min((batch + 1) * 200, count)
                        var loaded = false
                        for _ in 0..<3 where !loaded { loaded = await system.load(range) }
                        if !loaded { FileHandle.standardError.write(Data("\(system.name): load batch \(batch) failed\n".utf8)) }
                    }
                }
            }
        }
        return Double(count) / Date().timeIntervalSince(started)
    }

    /// Downloads a whole zone's change feed from no token: records and records per second.
    func changeFeed(zone: String) async -> (records: Int, perSecond: Double) {
        let url =
            "\(options.url)/database/1/\(options.container)/\(options.environment)/private/changes/zone?ckAPIToken=\(options.apiToken)&ckWebAuthToken=\(options.webAuthToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
        let started = Date()
        var token: String?
        var received = 0
        while true {
            let tokenJSON = token.map { #","syncToken":"\#($0)""# } ?? ""
            guard let text = await send(.POST, url, #"{"zones":[{"zoneID":{"zoneName":"\#(zone)"},"resultsLimit":200\#(tokenJSON)}]}"#),
                let answer = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                let entry = (answer["zones"] as? [[String: Any]])?.first
            else { return (received, 0) }
            received += (entry["records"] as? [Any])?.count ?? 0
            token = entry["syncToken"] as? String
            if entry["moreComing"] as? Bool != true { break }
        }
        return (received, Double(received) / Date().timeIntervalSince(started))
    }

    // MARK: Raw SQLite

    /// Rows per second in transactions of `rowsPerTransaction` (1 = single-row commits).
    func rawSQLite(rowsPerTransaction: Int) throws -> Cell {
        let path = (options.rawDirectory as NSString).appendingPathComponent("raw-\(UUID().uuidString).sqlite")
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let queue = try DatabaseQueue(path: path)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = \(options.synchronous)")
            try db.execute(sql: "CREATE TABLE items (zone_id INTEGER, name TEXT, fields BLOB, seq INTEGER, UNIQUE(zone_id, name))")
        }
        let payload = Data(#"{"title":{"value":"item 1 of the benchmark","type":"STRING"},"category":{"value":"c1","type":"STRING"},"count":{"value":1,"type":"INT64"},"score":{"value":0.14,"type":"DOUBLE"}}"#.utf8)
        var rounds: [Measurement] = []
        var index = 0
        for _ in 0..<options.rounds {
            var measurement = Measurement()
            let end = Date().addingTimeInterval(options.seconds)
            try queue.writeWithoutTransaction { db in
                let insert = try db.makeStatement(sql: "INSERT INTO items VALUES (1, ?, ?, ?)")
                while Date() < end {
                    let began = Date()
                    try db.inTransaction {
                        for _ in 0..<rowsPerTransaction {
                            index += 1
                            try insert.execute(arguments: ["r\(index)", payload, index])
                        }
                        return .commit
                    }
                    measurement.latencies.append(Date().timeIntervalSince(began))
                    measurement.operations += rowsPerTransaction
                }
            }
            measurement.seconds = options.seconds
            rounds.append(measurement)
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        return Cell(perSecond: median(rounds.map(\.perSecond)), p50: median(rounds.map { $0.percentile(0.5) }), p99: median(rounds.map { $0.percentile(0.99) }))
    }

    // MARK: The run

    func run() async throws {
        let withPocketBase = !options.pocketBaseURL.isEmpty
        let writesOnly = options.writesOnly
        print("Nimbus vs PocketBase: synchronous=\(options.synchronous), \(options.rounds) rounds of \(options.seconds) s after \(options.warmup) s warm-up, medians")
        let nimbus = nimbus()
        let ids = IDs()
        let pocketBase = pocketBase(ids: ids)
        let systems = withPocketBase ? [nimbus, pocketBase] : [nimbus]
        var rows: [(String, [String: Cell], ceiling: Cell?)] = []
        var loads: [String: Double] = [:]

        // Profiling one row (`--only`) skips the ceiling.
        let rawSingle = options.only.isEmpty ? try rawSQLite(rowsPerTransaction: 1) : Cell()
        let rawBulk = options.only.isEmpty ? try rawSQLite(rowsPerTransaction: 1000) : Cell()

        func row(_ name: String, clients: Int, perCall: Int = 1, ceiling: Cell? = nil, _ pick: (System) -> @Sendable (Int) async -> Bool) async {
            if !options.only.isEmpty, !name.contains(options.only) { return }
            var cells: [String: Cell] = [:]
            for system in systems { cells[system.name] = await measure(clients: clients, perCall: perCall, pick(system)) }
            rows.append((name, cells, ceiling))
            print("  measured: \(name)")
        }
        await row("single-record create, 64 clients", clients: 64, ceiling: rawSingle) { $0.create }
        await row("single-record create, 1 client", clients: 1, ceiling: rawSingle) { $0.create }
        await row("200-record batch save, 4 clients (records/s)", clients: 4, perCall: 200, ceiling: rawBulk) { $0.batch }
        if !writesOnly {
            for system in systems { loads[system.name] = await preload(system, count: options.listRecords) }
            await row("fetch one record by ID, 64 clients", clients: 64) { $0.fetch }
            await row("fetch one record by ID, 1 client", clients: 1) { $0.fetch }
            await row("filtered + sorted list of 20 over \(options.listRecords / 1000)k, 64 clients", clients: 64) { $0.list }
            await row("filtered + sorted list of 20 over \(options.listRecords / 1000)k, 1 client", clients: 1) { $0.list }
        }
        var feed: (records: Int, perSecond: Double)?
        if !writesOnly, options.only.isEmpty || "zone change feed".contains(options.only) {
            // The zone "Bench" holds the preloaded records and the batches' records: download it all.
            var runs: [(records: Int, perSecond: Double)] = []
            for _ in 0..<options.rounds { runs.append(await changeFeed(zone: "Bench")) }
            feed = runs.sorted { $0.perSecond < $1.perSecond }[runs.count / 2]
        }

        var notification: NotificationBenchmark.Latencies?
        if !writesOnly, options.only.isEmpty || "save -> notification".contains(options.only) {
            // One save at a time by one device; another device of the user hears it through a
            // database subscription on its WebSocket.
            let benchmark = NotificationBenchmark(options: options)
            var listener = await benchmark.listen()
            notification = try await benchmark.latencies(&listener.frames)
            listener.task.cancel()
            print("  measured: save -> notification")
        }

        // The table, as Markdown (docs/benchmarks.md takes it as printed).
        func number(_ value: Double) -> String { value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value) }
        func line(_ cells: [String]) { print("| " + cells.joined(separator: " | ") + " |") }
        print("\nNimbus (\(options.environment), synchronous=\(options.synchronous)) and PocketBase; per second, (p50, p99 ms)\n")
        line(["scenario", "Nimbus", "PocketBase", "Nimbus / PocketBase", "Nimbus / raw SQLite"])
        line(["---", "---", "---", "---", "---"])
        var jsonRows: [[String: Any]] = []
        for (name, cells, ceiling) in rows {
            func cellText(_ cell: Cell?) -> String {
                guard let cell else { return "-" }
                return "\(number(cell.perSecond)) (\(String(format: "%.2f", cell.p50)), \(String(format: "%.2f", cell.p99)))" + (cell.errors > 0 ? " err \(cell.errors)" : "")
            }
            let n = cells["Nimbus"]!, pb = cells["PocketBase"]
            let ratio = pb.map { n.perSecond / max($0.perSecond, 0.001) }
            let ofRaw = ceiling.flatMap { $0.perSecond > 0 ? n.perSecond / $0.perSecond : nil }
            line([name, cellText(n), cellText(pb), ratio.map { String(format: "%.2f×", $0) } ?? "-", ofRaw.map { String(format: "%.2f", $0) } ?? "-"])
            var json: [String: Any] = ["scenario": name, "nimbus": n.json]
            if let pb { json["pocketbase"] = pb.json }
            if let ratio { json["nimbusOverPocketBase"] = ratio }
            if let ofRaw { json["nimbusOverRawSQLite"] = ofRaw }
            jsonRows.append(json)
        }
        if let feed {
            line(["zone change feed download, \(feed.records) records (records/s)", number(feed.perSecond), "-", "-", "-"])
        }
        if let notification {
            line(["save → WebSocket notification, 1 client (ms)", String(format: "p50 %.2f, p99 %.2f", notification.p50, notification.p99), "-", "-", "-"])
        }
        line(["raw SQLite single-row commits", "\(number(rawSingle.perSecond)) (\(String(format: "%.3f", rawSingle.p50)), \(String(format: "%.3f", rawSingle.p99)))", "-", "-", "-"])
        line(["raw SQLite rows in 1,000-row transactions", number(rawBulk.perSecond), "-", "-", "-"])
        for (name, rate) in loads.sorted(by: { $0.key < $1.key }) {
            line(["preload of \(options.listRecords) records, \(name) (records/s)", number(rate), "-", "-", "-"])
        }

        var json: [String: Any] = [
            "synchronous": options.synchronous, "rounds": options.rounds, "secondsPerRound": options.seconds,
            "warmupSeconds": options.warmup, "rows": jsonRows, "rawSQLiteSingleRowCommitsPerSecond": rawSingle.perSecond,
            "rawSQLiteRowsPerSecondIn1000RowTransactions": rawBulk.perSecond, "preloadRecordsPerSecond": loads,
            "machine": ProcessInfo.processInfo.hostName, "cores": ProcessInfo.processInfo.activeProcessorCount,
        ]
        if let notification {
            json["saveToNotification"] = ["p50ms": notification.p50, "p99ms": notification.p99, "samples": options.samples]
        }
        json["environment"] = options.environment
        if let feed {
            json["changeFeedRecordsPerSecond"] = feed.perSecond
            json["changeFeedRecords"] = feed.records
        }
        try FileManager.default.createDirectory(
            atPath: (options.output as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try JSONSerialization.data(withJSONObject: json, options: [.prettyPrinted, .sortedKeys]).write(to: URL(fileURLWithPath: options.output))
        try await http.shutdown()
    }
}
