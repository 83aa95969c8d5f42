import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NimbusCore
import NimbusSQLite
import NimbusStorage
import NimbusWire
import WSClient

/// Issue 5's figures.
///
/// `--scenario matching`: in-process, no HTTP. Query subscriptions on the public database
/// (1,000 per user, the per-database limit, so 10 users for 10,000), then single-record saves
/// with the notification pipeline running; reports the pipeline's own matching time per write
/// at 10, 1,000 and 10,000 subscriptions, for equality filters (filed by value in the index)
/// and for range filters (evaluated one by one within the record type).
///
/// `--scenario notify`: against a running server. A listener device and a writer device of
/// one user; save → WebSocket frame latency, one save at a time, with no idle clients and
/// then with `--idle` idle connected clients (another user, which hears nothing), and the
/// server's resident memory per idle client (`--server-pid`).
struct NotificationBenchmark {
    let options: Options

    // MARK: Matching, in process

    func runMatching() async throws {
        let directory = (options.rawDirectory as NSString).appendingPathComponent("nimbus-matching-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("Nimbus matching benchmark: \(options.samples) single-record saves per row, pipeline running, SQLite synchronous=NORMAL")
        print(String(format: "%-40@ %16@ %20@ %10@", "subscriptions" as NSString, "match µs/write" as NSString, "notifications/write" as NSString, "saves/s" as NSString))
        for filter in ["equality", "range"] {
            for count in [10, 1_000, 10_000] {
                let row = try await matchingRow(directory: directory + "/\(filter)-\(count)", filter: filter, subscriptions: count)
                print(String(format: "%-40@ %16.2f %20.2f %10.0f", "\(count) query subscriptions, \(filter)" as NSString, row.microsPerWrite, row.notificationsPerWrite, row.savesPerSecond))
            }
        }
    }

    struct MatchingRow {
        var microsPerWrite: Double
        var notificationsPerWrite: Double
        var savesPerSecond: Double
    }

    private func matchingRow(directory: String, filter: String, subscriptions: Int) async throws -> MatchingRow {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let bench = try await InProcessService(
            storage: UnitOfWorkDriver(try SQLiteStorage(path: directory + "/nimbus.sqlite", synchronous: .normal)), container: "iCloud.bench.matching")
        let service = bench.service
        let caller = bench.caller
        let writer = DatabaseTarget(caller: try await caller("writer"), scope: .public)
        func save(_ name: String, category: Int) async throws {
            let body: JSON = [
                "operations": [[
                    "operationType": "create",
                    "record": [
                        "recordType": "Item", "recordName": .string(name),
                        "fields": ["category": ["value": .int(Int64(category))], "title": ["value": "bench"]],
                    ],
                ]]
            ]
            _ = try await service.modifyRecords(writer, RecordsModifyRequest(json: ObjectReader(root: body)))
        }
        try await save("seed", category: -1)  // defines Item

        let perUser = Limits.subscriptionsPerDatabase.value
        var created = 0
        var user = 0
        while created < subscriptions {
            let subscriber = DatabaseTarget(caller: try await caller("subscriber\(user)"), scope: .public)
            user += 1
            let batch = min(perUser, subscriptions - created)
            for chunkStart in stride(from: 0, to: batch, by: Limits.operationsPerRequest.value) {
                let operations: [JSON] = (chunkStart..<min(batch, chunkStart + Limits.operationsPerRequest.value)).map { offset in
                    let index = created + offset
                    let comparator: JSON = filter == "equality" ? "EQUALS" : "GREATER_THAN"
                    // Range: every threshold is above any saved category, so none fires.
                    let value = filter == "equality" ? index : (index + 1) * 1_000_000
                    return [
                        "operationType": "create",
                        "subscription": [
                            "subscriptionID": .string("s\(index)"), "subscriptionType": "query",
                            "query": [
                                "recordType": "Item",
                                "filterBy": [["comparator": comparator, "fieldName": "category", "fieldValue": ["value": .int(Int64(value))]]],
                            ],
                            "notificationInfo": ["shouldSendContentAvailable": true],
                        ],
                    ]
                }
                _ = try await service.modifySubscriptions(
                    subscriber, SubscriptionsModifyRequest(json: ObjectReader(root: ["operations": .array(operations)])))
            }
            created += batch
        }

        let pipeline = Task { await service.runNotificationPipeline() }
        let before = service.notificationHub.currentStatistics
        let started = ContinuousClock.now
        for index in 0..<options.samples {
            // Every other save matches one equality subscription; range ones match none.
            try await save("r\(index)", category: index % 2 == 0 ? index % subscriptions : subscriptions + index)
        }
        while service.notificationHub.currentStatistics.writesMatched - before.writesMatched < options.samples {
            try await Task.sleep(for: .milliseconds(5))
        }
        let elapsed = ContinuousClock.now - started
        let after = service.notificationHub.currentStatistics
        service.notificationHub.finish()
        await pipeline.value
        try await service.storage.close()
        let writes = Double(after.writesMatched - before.writesMatched)
        return MatchingRow(
            microsPerWrite: Double(after.matchingNanoseconds - before.matchingNanoseconds) / writes / 1_000,
            notificationsPerWrite: Double(after.notificationsStored - before.notificationsStored) / writes,
            savesPerSecond: writes / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18))
    }

    // MARK: Latency and memory, over HTTP and WebSockets

    /// A listener device subscribed to the private database and holding the WebSocket; saves
    /// by another device of the same user then reach it as frames.
    struct Listener {
        let task: Task<Void, Never>
        var frames: AsyncStream<Void>.Iterator
    }

    func listen() async -> Listener {
        // The subscription the listener hears through.
        _ = await post(
            options, "private/subscriptions/modify",
            #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"bench-db","subscriptionType":"database"}}]}"#)
        let frames = AsyncStream<Void>.makeStream(bufferingPolicy: .unbounded)
        let listenerURL = webSocketBase + "&ckWebAuthToken=\(options.webAuthToken)&ckDeviceID=listener"
        let ready = AsyncStream<Void>.makeStream()
        let task = Task {
            _ = try? await WebSocketClient.connect(url: listenerURL, logger: Logger(label: "bench")) { inbound, _, _ in
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message else { continue }
                    if text.contains(#""type":"ready""#) { ready.continuation.yield() }
                    if text.contains(#""type":"notification""#) { frames.continuation.yield() }
                }
            }
        }
        var readyIterator = ready.stream.makeAsyncIterator()
        _ = await readyIterator.next()
        return Listener(task: task, frames: frames.stream.makeAsyncIterator())
    }

    private var webSocketBase: String {
        (options.urls.last ?? options.url).replacingOccurrences(of: "http://", with: "ws://")
            + "/device/1/\(options.container)/\(options.environment)/notifications/connect?ckAPIToken=\(options.apiToken)"
    }

    func runNotify() async throws {
        var listener = await listen()
        print("Nimbus notification benchmark: \(options.samples) saves per row, one at a time; save → WebSocket frame")
        let quiet = try await latencies(&listener.frames)
        report("0 idle clients", quiet)

        let rssBefore = residentKilobytes(pid: options.serverPID)
        let idleStarted = Date()
        let idle = try await connectIdle(count: options.idle, base: webSocketBase)
        let connectSeconds = Date().timeIntervalSince(idleStarted)
        try await Task.sleep(for: .seconds(2))  // let the server settle
        let rssAfter = residentKilobytes(pid: options.serverPID)
        let loaded = try await latencies(&listener.frames)
        report("\(idle.connected) idle clients", loaded)
        print(String(format: "idle clients connected: %d of %d in %.1f s", idle.connected, options.idle, connectSeconds))
        if let rssBefore, let rssAfter, idle.connected > 0 {
            print(String(format: "server resident memory: %.1f MB before, %.1f MB with idle clients: %.1f KB per idle client",
                Double(rssBefore) / 1024, Double(rssAfter) / 1024, Double(rssAfter - rssBefore) / Double(idle.connected)))
        }
        print(String(format: "p50 ratio (idle / none): %.2f", loaded.p50 / max(quiet.p50, 0.001)))
        listener.task.cancel()
        for task in idle.tasks { task.cancel() }
        // What the server keeps once they have all left: right away, and after the 10 s in which
        // `nimbus serve` hands freed memory back (MemoryReturnService).
        try await Task.sleep(for: .seconds(2))
        let rssLeft = residentKilobytes(pid: options.serverPID)
        try await Task.sleep(for: .seconds(10))
        let rssSettled = residentKilobytes(pid: options.serverPID)
        if let rssLeft, let rssSettled {
            print(String(format: "server resident memory after the idle clients left: %.1f MB at 2 s, %.1f MB at 12 s",
                Double(rssLeft) / 1024, Double(rssSettled) / 1024))
        }
    }

    struct Latencies {
        var p50: Double
        var p99: Double
        var afterAckP50: Double
        var afterAckP99: Double
        var max: Double
    }

    private func report(_ name: String, _ latencies: Latencies) {
        print(String(format: "%-24@ save → frame p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms   (after the save's answer: p50 %5.2f ms  p99 %5.2f ms)",
            name as NSString, latencies.p50, latencies.p99, latencies.max, latencies.afterAckP50, latencies.afterAckP99))
    }

    func latencies(_ frames: inout AsyncStream<Void>.Iterator) async throws -> Latencies {
        var total: [Double] = []
        var afterAck: [Double] = []
        let runID = UUID().uuidString.prefix(8)
        for index in 0..<(options.samples + 20) {
            let started = ContinuousClock.now
            // An Item, the type the comparison's production schema has.
            let operation = #"{"operationType":"create","record":{"recordType":"Item","recordName":"n-\#(runID)-\#(index)","fields":{"title":{"value":"note \#(index)","type":"STRING"}}}}"#
            let ok = await postAsDevice(
                "private/records/modify", #"{"zoneID":{"zoneName":"Bench"},"operations":[\#(operation)]}"#, device: "writer")
            guard ok else { throw BenchmarkError("a save failed") }
            let acknowledged = ContinuousClock.now
            _ = await frames.next()
            let received = ContinuousClock.now
            if index < 20 { continue }  // warm-up
            total.append(milliseconds(received - started))
            afterAck.append(milliseconds(received - acknowledged))
        }
        total.sort()
        afterAck.sort()
        func percentile(_ values: [Double], _ p: Double) -> Double { values[min(values.count - 1, Int(Double(values.count) * p))] }
        return Latencies(
            p50: percentile(total, 0.5), p99: percentile(total, 0.99), afterAckP50: percentile(afterAck, 0.5),
            afterAckP99: percentile(afterAck, 0.99), max: total.last ?? 0)
    }

    private func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1_000 + Double(duration.components.attoseconds) / 1e15
    }

    private func postAsDevice(_ path: String, _ body: String, device: String) async -> Bool {
        var request = HTTPClientRequest(
            url: "\(options.url)/database/1/\(options.container)/\(options.environment)/\(path)?ckAPIToken=\(options.apiToken)&ckWebAuthToken=\(options.webAuthToken)")
        request.method = .POST
        request.headers.add(name: "X-Nimbus-Device-ID", value: device)
        request.body = .bytes(ByteBuffer(string: body))
        guard let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(30)),
            let bytes = try? await response.body.collect(upTo: 1 << 20)
        else { return false }
        guard response.status == .ok, !String(buffer: bytes).contains("serverErrorCode") else {
            FileHandle.standardError.write(Data("save failed: \(String(buffer: bytes))\n".utf8))
            return false
        }
        return true
    }

    /// Opens `count` WebSocket connections as the idle user, a few hundred at a time; each
    /// stays open, hearing nothing, until its task is cancelled.
    private func connectIdle(count: Int, base: String) async throws -> (connected: Int, tasks: [Task<Void, Never>]) {
        guard count > 0 else { return (0, []) }
        var signIn = HTTPClientRequest(url: "\(options.url)/auth/1/\(options.container)/\(options.environment)/signin?ckAPIToken=\(options.apiToken)")
        signIn.method = .POST
        signIn.body = .bytes(ByteBuffer(string: #"{"username":"\#(options.idleUser)","password":"\#(options.idlePassword)"}"#))
        let response = try await HTTPClient.shared.execute(signIn, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 16)
        guard let token = (try? JSON.parse(Array(body.readableBytesView)))?["ckWebAuthToken"]?.stringValue else {
            throw BenchmarkError("the idle user could not sign in: \(String(buffer: body))")
        }
        let connected = Counter()
        var tasks: [Task<Void, Never>] = []
        let batch = 250
        var opened = 0
        for start in stride(from: 0, to: count, by: batch) {
            let ready = AsyncStream<Void>.makeStream()
            let size = min(batch, count - start)
            for index in start..<(start + size) {
                let url = base + "&ckWebAuthToken=\(token)&ckDeviceID=idle-\(index)"
                tasks.append(
                    Task {
                        _ = try? await WebSocketClient.connect(url: url, logger: Logger(label: "idle")) { inbound, _, _ in
                            for try await message in inbound.messages(maxSize: 1 << 16) {
                                if case .text(let text) = message, text.contains(#""type":"ready""#) {
                                    _ = connected.next()
                                    ready.continuation.yield()
                                }
                            }
                        }
                        ready.continuation.yield()  // failed or closed: do not wait for it
                    })
            }
            var iterator = ready.stream.makeAsyncIterator()
            for _ in 0..<size { _ = await iterator.next() }
            opened += size
        }
        _ = opened
        return (connected.next() - 1, tasks)
    }

    private func residentKilobytes(pid: Int) -> Int? {
        guard pid > 0, let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }
}

struct BenchmarkError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
