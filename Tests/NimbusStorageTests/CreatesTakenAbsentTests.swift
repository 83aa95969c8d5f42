import Foundation
import NimbusSQLite
@testable import NimbusStorage
import NimbusTestSupport
import Testing

/// SQLite decides a write in its own transaction without reading the records its creates name
/// (`ReadUnit.expect`, `assumesCreatesAbsent`): the insert's unique key finds one that exists,
/// and the unit is undone and decided again over the records read. Whatever it decided the
/// first time, its answer and its writes are those of a unit that read them.
@Suite struct CreatesTakenAbsentTests {
    private static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    /// A store whose statements' text is kept, with zone "Z" holding the live record "taken"
    /// and the tombstone "gone".
    private func withStore(_ body: (UnitOfWorkDriver, ZoneRow, StatementLog) async throws -> Void) async throws {
        try await StatementLog.withStore { driver, log, _ in
            let zone = try await driver.write { tx in
                let database = try tx.ensureDatabase(Self.key)
                let zone = try tx.createZone(databaseID: database.id, name: "Z")
                try tx.putRecord(StorageConformanceTests.row(zone.id, "taken", sequence: try tx.nextRecordSequence(in: zone)))
                try tx.putRecord(StorageConformanceTests.row(zone.id, "gone", sequence: try tx.nextRecordSequence(in: zone), deleted: true))
                return zone
            }
            try await body(driver, zone, log)
        }
    }

    private struct Refused: Error {}

    /// What each run of a create batch's closure saw of each name, as a save would read it:
    /// absent, live or deleted. Absent ones are saved as new, the others as they are; with
    /// `refusing`, the batch fails after its saves as an atomic batch does.
    private static func create(
        _ names: [String], in zone: ZoneRow, on driver: UnitOfWorkDriver, refusing: Bool = false, runs: LockedCounter
    ) async throws -> [String: String] {
        try await driver.write(inZone: ZoneOrder(database: key, zoneName: zone.name)) { tx in
            runs.increment()
            try tx.expect(records: names, creating: Set(names), inZone: zone.name, of: key)
            var seen: [String: String] = [:]
            for name in names {
                let stored = try tx.record(zoneID: zone.id, name: name)
                seen[name] = stored.map { $0.isDeleted ? "deleted" : "live" } ?? "absent"
                guard stored?.isDeleted != false else { continue }
                try tx.putRecord(StorageConformanceTests.row(zone.id, name, sequence: try tx.nextRecordSequence(in: zone)), isNew: stored == nil)
            }
            if refusing { throw Refused() }
            return seen
        }
    }

    @Test func newRecordsAreCreatedWithoutReadingThem() async throws {
        try await withStore { driver, zone, log in
            let runs = LockedCounter()
            _ = log.take()
            let seen = try await Self.create(["a", "b", "c"], in: zone, on: driver, runs: runs)
            #expect(seen == ["a": "absent", "b": "absent", "c": "absent"])
            #expect(runs.value == 1)
            let reads = log.take().filter { $0.contains("FROM records WHERE zone_id = ? AND record_name") }
            #expect(reads.isEmpty, "a create read its record: \(reads)")
            // One create alone neither.
            _ = try await Self.create(["d"], in: zone, on: driver, runs: runs)
            #expect(log.take().filter { $0.contains("FROM records WHERE zone_id = ? AND record_name") }.isEmpty)
            let stored = try await driver.read { tx in try ["a", "b", "c", "d"].map { try tx.record(zoneID: zone.id, name: $0)?.recordName } }
            #expect(stored == ["a", "b", "c", "d"])
        }
    }

    @Test func aCreatedRecordThatExistsIsDecidedAgainOverTheRecordRead() async throws {
        try await withStore { driver, zone, _ in
            let runs = LockedCounter()
            let seen = try await Self.create(["a", "taken", "b"], in: zone, on: driver, runs: runs)
            #expect(runs.value == 2, "the first run's insert of 'taken' must fail and the unit run again")
            #expect(seen == ["a": "absent", "taken": "live", "b": "absent"])
            // The first run's saves of a and b were undone with it: each saved once, with the
            // zone's next sequences after the tombstone's (the setup's last save).
            let sequences = try await driver.read { tx in
                try ["gone", "a", "b"].map { try #require(try tx.record(zoneID: zone.id, name: $0)).changeSequence }
            }
            #expect(sequences.dropFirst() == [sequences[0] + 1, sequences[0] + 2], "\(sequences)")
        }
    }

    @Test func aTombstoneIsFoundAndCreatedOver() async throws {
        try await withStore { driver, zone, _ in
            let runs = LockedCounter()
            let seen = try await Self.create(["gone", "x"], in: zone, on: driver, runs: runs)
            #expect(runs.value == 2)
            #expect(seen == ["gone": "deleted", "x": "absent"])
            let gone = try await driver.read { tx in try tx.record(zoneID: zone.id, name: "gone") }
            #expect(gone?.isDeleted == false)
        }
    }

    /// Writers creating one name at once share group commits: the first insert wins, and each
    /// of the others finds the record its unit took to be absent, and is decided again over it.
    @Test func concurrentCreatesOfOneNameSaveItOnce() async throws {
        try await withStore { driver, zone, _ in
            let runs = LockedCounter()
            let seen = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<16 {
                    group.addTask { try await Self.create(["same"], in: zone, on: driver, runs: runs)["same"] ?? "?" }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(seen.filter { $0 == "absent" }.count == 1, "\(seen)")
            #expect(seen.filter { $0 == "live" }.count == 15, "\(seen)")
            #expect(runs.value == 31, "one run for the winner, two for each of the others")
        }
    }

    /// A unit that fails may fail for a record it took to be absent: its failure stands only
    /// when none of them exists, else it is decided again over what it reads.
    @Test func aFailureStandsOnlyWhenWhatItTookAbsentIsAbsent() async throws {
        try await withStore { driver, zone, _ in
            let runs = LockedCounter()
            await #expect(throws: Refused.self) { try await Self.create(["p", "q"], in: zone, on: driver, refusing: true, runs: runs) }
            #expect(runs.value == 1)
            await #expect(throws: Refused.self) { try await Self.create(["p", "taken"], in: zone, on: driver, refusing: true, runs: runs) }
            #expect(runs.value == 3, "the failure rested on 'taken' being absent: decided again")
            let stored = try await driver.read { tx in try ["p", "q"].map { try tx.record(zoneID: zone.id, name: $0) } }
            #expect(stored.allSatisfy { $0 == nil })
        }
    }

    /// A create that took its record to be absent and saved nothing (its save failed alone):
    /// checked as the unit is applied.
    @Test func anUnsavedCreateIsCheckedAsTheUnitApplies() async throws {
        try await withStore { driver, zone, _ in
            let runs = LockedCounter()
            let seen = try await driver.write(inZone: ZoneOrder(database: Self.key, zoneName: zone.name)) { tx in
                runs.increment()
                try tx.expect(records: ["taken", "n"], creating: ["taken", "n"], inZone: zone.name, of: Self.key)
                // "taken" is only read, as a save refused for another reason would leave it.
                let taken = try tx.record(zoneID: zone.id, name: "taken")
                try tx.putRecord(StorageConformanceTests.row(zone.id, "n", sequence: try tx.nextRecordSequence(in: zone)), isNew: true)
                return taken == nil ? "absent" : "live"
            }
            #expect(seen == "live")
            #expect(runs.value == 2)
        }
    }
}
