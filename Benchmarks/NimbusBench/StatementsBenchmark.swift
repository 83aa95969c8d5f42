import Foundation
import NimbusCore
import NimbusSQLite
import NimbusStorage
import NimbusWire

/// SQL statements per request on the embedded driver, counted by SQLite's trace hook: what the
/// storage protocol asks of an engine today. Ported call for call to a networked engine, each
/// statement would be a round trip (issue 15's budget: at most 10 for a 200-record batch, 1–2
/// for a lookup or a query page). Transaction statements (BEGIN, SAVEPOINT, COMMIT) count too.
struct StatementsBenchmark {
    let options: Options

    final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        func increment() { lock.withLock { count += 1 } }
        var value: Int { lock.withLock { count } }
    }

    func run() async throws {
        let directory = options.rawDirectory + "/nimbus-statements-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let tally = Tally()
        let storage = try SQLiteStorage(path: directory + "/nimbus.sqlite", synchronous: .normal) { _ in tally.increment() }
        let bench = try await InProcessService(storage: UnitOfWorkDriver(storage), container: "iCloud.bench.statements")
        let service = bench.service
        let alice = try await bench.caller("alice")
        let target = DatabaseTarget(caller: alice, scope: .private)

        func record(_ name: String, _ index: Int) -> JSON {
            ["recordType": "Item", "recordName": .string(name),
             "fields": ["category": ["value": .int(Int64(index % 10))], "title": ["value": .string("title \(index)")], "count": ["value": .int(Int64(index))]]]
        }
        func creates(_ names: [String]) -> JSON {
            .array(names.enumerated().map { ["operationType": "create", "record": record($0.element, $0.offset)] })
        }
        func measure(_ label: String, _ body: () async throws -> Void) async throws {
            let before = tally.value
            try await body()
            print(label.padding(toLength: 58, withPad: " ", startingAt: 0) + String(format: "%6d", tally.value - before))
        }
        _ = try await service.modifyZones(
            target, ZonesModifyRequest(json: ObjectReader(root: ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Bench"]]]]])))
        // Warm: the schema learns Item, the database and zones exist.
        _ = try await service.modifyRecords(target, RecordsModifyRequest(json: ObjectReader(root: ["operations": creates(["warm"])])))

        print("SQL statements per request (SQLite driver, in process, development, no subscriptions)")
        try await measure("records/modify, one new record (default zone)") {
            _ = try await service.modifyRecords(target, RecordsModifyRequest(json: ObjectReader(root: ["operations": creates(["one"])])))
        }
        let batch = (0..<200).map { "b\($0)" }
        try await measure("records/modify, 200-record atomic batch (custom zone)") {
            _ = try await service.modifyRecords(
                target, RecordsModifyRequest(json: ObjectReader(root: ["zoneID": ["zoneName": "Bench"], "operations": creates(batch)])))
        }
        try await measure("records/lookup, 1 record") {
            _ = try await service.lookupRecords(
                target, RecordsLookupRequest(json: ObjectReader(root: ["zoneID": ["zoneName": "Bench"], "records": [["recordName": "b7"]]])))
        }
        try await measure("records/lookup, 200 records") {
            _ = try await service.lookupRecords(
                target, RecordsLookupRequest(json: ObjectReader(root: [
                    "zoneID": ["zoneName": "Bench"], "records": .array(batch.map { ["recordName": .string($0)] }),
                ])))
        }
        try await measure("records/query, equality filter + sort, page of 20") {
            _ = try await service.queryRecords(
                target, RecordsQueryRequest(json: ObjectReader(root: [
                    "zoneID": ["zoneName": "Bench"], "resultsLimit": 20,
                    "query": ["recordType": "Item", "filterBy": [["comparator": "EQUALS", "fieldName": "category", "fieldValue": ["value": 3]]],
                              "sortBy": [["fieldName": "count", "ascending": true]]],
                ])))
        }
        try await measure("records/changes, custom zone, page of 200") {
            _ = try await service.recordChanges(
                target, ZoneChangesRequest(json: ObjectReader(root: ["zones": [["zoneID": ["zoneName": "Bench"], "resultsLimit": 200]]])))
        }
        let update: JSON = .array(batch.prefix(200).map { ["operationType": "forceUpdate", "record": record($0, 1)] })
        try await measure("records/modify, 200 updates (custom zone)") {
            _ = try await service.modifyRecords(
                target, RecordsModifyRequest(json: ObjectReader(root: ["zoneID": ["zoneName": "Bench"], "operations": update])))
        }
        try await storage.close()
    }
}
