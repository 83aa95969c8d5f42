import AsyncHTTPClient
import Foundation
import NIOCore

/// Loads `records` Items into the private zone "Bench", then times, one client at a time:
/// an equality filter plus a sort (20 results), a text search and a NEAR query.
struct QueryBenchmark {
    let options: Options

    /// A deterministic generator, so every run loads the same data.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let words = (0..<2_000).map { "w\($0)" }

    func item(_ index: Int, _ random: inout SplitMix) -> String {
        let category = "c\(Int.random(in: 0..<100, using: &random))"
        let score = Int.random(in: 0..<1_000_000, using: &random)
        let title = (0..<4).map { _ in Self.words[Int.random(in: 0..<Self.words.count, using: &random)] }.joined(separator: " ")
        let latitude = 37.0 + Double.random(in: 0..<1, using: &random)
        let longitude = -122.5 + Double.random(in: 0..<1, using: &random)
        return #"{"operationType":"create","record":{"recordType":"Item","recordName":"i\#(index)","fields":{"category":{"value":"\#(category)"},"score":{"value":\#(score)},"title":{"value":"\#(title)"},"place":{"value":{"latitude":\#(latitude),"longitude":\#(longitude)}}}}}"#
    }

    func load() async throws {
        let started = Date()
        let batches = (options.records + 199) / 200
        let next = Counter()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    while true {
                        let batch = next.next() - 1
                        if batch >= batches { return }
                        var random = SplitMix(state: UInt64(batch))
                        let range = (batch * 200)..<min((batch + 1) * 200, options.records)
                        let body = #"{"zoneID":{"zoneName":"Bench"},"operations":[\#(range.map { item($0, &random) }.joined(separator: ","))]}"#
                        var ok = false
                        for _ in 0..<3 where !ok { ok = await post(options, "private/records/modify", body) }
                        if !ok { FileHandle.standardError.write(Data("batch \(batch) failed\n".utf8)) }
                    }
                }
            }
        }
        let seconds = Date().timeIntervalSince(started)
        print(String(format: "loaded %d records in %.1f s (%.0f records/s)", options.records, seconds, Double(options.records) / seconds))
    }

    func time(_ name: String, _ bodies: [String]) async -> [String: Double] {
        var latencies: [Double] = []
        var failures = 0
        for (index, body) in bodies.enumerated() {
            let began = Date()
            let ok = await post(options, "private/records/query", body)
            let elapsed = Date().timeIntervalSince(began)
            if index >= 20 { latencies.append(elapsed) }  // the first 20 warm up
            if !ok { failures += 1 }
        }
        latencies.sort()
        let p50 = latencies[latencies.count / 2] * 1000
        let p99 = latencies[min(latencies.count - 1, latencies.count * 99 / 100)] * 1000
        print(String(format: "%-48@ p50 %7.2f ms  p99 %7.2f ms  failures %d", name as NSString, p50, p99, failures))
        return ["p50ms": p50, "p99ms": p99, "failures": Double(failures)]
    }

    func run() async throws {
        print("Nimbus query benchmark: \(options.records) records of one type, 1 client, \(options.samples) queries each")
        if options.loadRecords { try await load() }
        var random = SplitMix(state: 42)
        let zone = #""zoneID":{"zoneName":"Bench"}"#
        let equality = (0..<options.samples).map { _ in
            #"{\#(zone),"resultsLimit":20,"query":{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"category","fieldValue":{"value":"c\#(Int.random(in: 0..<100, using: &random))"}}],"sortBy":[{"fieldName":"score","ascending":false}]}}"#
        }
        let text = (0..<options.samples).map { _ in
            #"{\#(zone),"resultsLimit":20,"query":{"recordType":"Item","filterBy":[{"comparator":"CONTAINS_ALL_TOKENS","fieldName":"title","fieldValue":{"value":"\#(Self.words[Int.random(in: 0..<Self.words.count, using: &random)])"}}]}}"#
        }
        let near = (0..<options.samples).map { _ in
            let latitude = 37.0 + Double.random(in: 0.1..<0.9, using: &random)
            let longitude = -122.5 + Double.random(in: 0.1..<0.9, using: &random)
            return #"{\#(zone),"resultsLimit":20,"query":{"recordType":"Item","filterBy":[{"comparator":"NEAR","fieldName":"place","distance":1000,"fieldValue":{"value":{"latitude":\#(latitude),"longitude":\#(longitude)}}}]}}"#
        }
        let results: [String: [String: Double]] = [
            "equalityPlusSort": await time("equality filter + sort, 20 results", equality),
            "textSearch": await time("text search (CONTAINS_ALL_TOKENS), 20 results", text),
            "near": await time("NEAR 1 km, 20 results", near),
        ]
        let json = try JSONSerialization.data(withJSONObject: ["records": options.records, "results": results], options: [.prettyPrinted, .sortedKeys])
        try FileManager.default.createDirectory(
            atPath: (options.output as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try json.write(to: URL(fileURLWithPath: options.output))
    }
}
