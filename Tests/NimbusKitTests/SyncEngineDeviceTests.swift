import Foundation
@testable import NimbusKit
import NimbusTestSupport
import Testing

/// CKSyncEngine as Apple's own tests use it (issue 43): several engines in one process are
/// several devices; what another device did (a change that wins a conflict, a zone or a
/// record deleted) fails the send with CloudKit's codes, throws from `sendChanges`, and
/// leaves pending exactly what the app adds again.
@Suite("NimbusKit CKSyncEngine: devices in one process, failures surfaced")
struct SyncEngineDeviceTests {
    static let zoneID = SyncEngineKitTests.zoneID
    static func id(_ name: String) -> CKRecord.ID { SyncEngineKitTests.id(name) }

    /// Ann's devices, their engines started (`SyncDevice`, SyncEngineKitTests.swift).
    static func devices(_ server: TestServer, _ names: String...) async throws -> [SyncDevice] {
        try await server.createUser("ann")
        let devices = names.map { SyncDevice(server, name: $0) }
        for device in devices { try await device.start() }
        return devices
    }

    /// Ann's devices A and B, both holding note "n" ("first"): A saved its zone and the note,
    /// B fetched them.
    static func devicesHoldingOneNote(_ server: TestServer) async throws -> (SyncDevice, SyncDevice) {
        let devices = try await Self.devices(server, "A", "B")
        let (a, b) = (devices[0], devices[1])
        a.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
        a.edit("n", "first")
        try await a.engine.sendChanges()
        try await b.engine.fetchChanges()
        expectEqual(b.notes["n"], "first")
        return (a, b)
    }

    /// A device that has just fetched everything.
    static func freshDevice(_ server: TestServer) async throws -> SyncDevice {
        let device = SyncDevice(server, name: "C")
        try await device.start()
        try await device.engine.fetchChanges()
        return device
    }

    /// The per-record error a failed send threw, by record name.
    static func itemError(_ error: CKError?, _ name: String) -> CKError? {
        error?.partialErrorsByItemID?[id(name)] as? CKError
    }

    @Test("two engines in one process and one folder are two devices: an engine's state is only what its app kept")
    func twoEnginesInOneProcess() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sync-shared-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: folder) }
            let a = SyncDevice(server, name: "A", journals: folder)
            let b = SyncDevice(server, name: "B", journals: folder)
            try await a.start()
            try await b.start()
            a.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
            for index in 0..<3 { a.edit("c\(index)", "contact \(index)") }
            #expect(b.engine.state.pendingRecordZoneChanges.isEmpty && b.engine.state.pendingDatabaseChanges.isEmpty)
            // Made now, in the same folder, from no state: a third device, with nothing of A's.
            let c = SyncDevice(server, name: "C", journals: folder)
            try await c.start()
            #expect(c.engine.state.pendingRecordZoneChanges.isEmpty && c.engine.state.pendingDatabaseChanges.isEmpty)

            try await a.engine.sendChanges()
            #expect(b.notes.isEmpty)
            try await b.engine.fetchChanges()
            try await c.engine.fetchChanges()
            expectEqual(b.notes, ["c0": "contact 0", "c1": "contact 1", "c2": "contact 2"])
            expectEqual(c.notes, b.notes)

            // A stateUpdate follows every change the app makes (the app keeps the state only
            // from those): an engine made again from the kept state is the same device.
            a.edit("c9", "added last")
            try await waitUntil { a.savedStates.last?.pending == ["c9"] }
            let again = SyncDevice(server, name: "A", journals: folder)
            again.inherit(from: a)
            try await again.start()
            expectEqual(again.engine.state.pendingRecordZoneChanges, [.saveRecord(Self.id("c9"))])
            #expect(b.engine.state.pendingRecordZoneChanges.isEmpty)
        }
    }

    @Test("journals: one per history; an earlier version's shared journal read for its own history only; the abandoned pruned")
    func journalFiles() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sync-journals-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = SyncEngineJournal(directory: folder, scope: .private)
        var ours = CKSyncEngine.State.Stored(containerIdentifier: "iCloud.test", databaseScope: "private")
        ours.pendingRecordZoneChanges = [.saveRecord(Self.id("kept"))]
        journal.write(ours, replacing: nil)
        expectEqual(journal.read(lineage: ours.lineage)?.pendingRecordZoneChanges, [.saveRecord(Self.id("kept"))])
        #expect(journal.read(lineage: UUID().uuidString) == nil)

        // A new history (an account switch) takes the place of the one it replaces.
        let previous = ours.lineage
        ours.lineage = UUID().uuidString
        journal.write(ours, replacing: previous)
        #expect(journal.read(lineage: previous) == nil)
        #expect(journal.read(lineage: ours.lineage) != nil)

        // The one journal of an earlier NimbusKit serves only the history it holds.
        var earlier = CKSyncEngine.State.Stored(containerIdentifier: "iCloud.test", databaseScope: "private")
        earlier.pendingRecordZoneChanges = [.saveRecord(Self.id("old"))]
        try JSONEncoder().encode(earlier).write(to: journal.sharedFile)
        expectEqual(journal.read(lineage: earlier.lineage)?.pendingRecordZoneChanges, [.saveRecord(Self.id("old"))])
        #expect(journal.read(lineage: UUID().uuidString) == nil)

        // Pruning: besides our own, the eight newest stay, and none untouched for 30 days.
        let now = Date()
        func other(_ age: TimeInterval) throws -> String {
            var stored = CKSyncEngine.State.Stored(containerIdentifier: "iCloud.test", databaseScope: "private")
            stored.lineage = UUID().uuidString
            journal.write(stored, replacing: nil)
            try FileManager.default.setAttributes(
                [.modificationDate: now.addingTimeInterval(-age)], ofItemAtPath: journal.file(stored.lineage).path)
            return stored.lineage
        }
        let newest = try (0..<7).map { try other(TimeInterval($0) * 60) }
        let eighth = try other(SyncEngineJournal.abandonedAfter - 3600)  // under 30 days: kept
        let ninth = try other(SyncEngineJournal.abandonedAfter - 1800)  // beyond the eight newest
        let stale = try other(SyncEngineJournal.abandonedAfter + 3600)
        try FileManager.default.setAttributes(
            [.modificationDate: now.addingTimeInterval(-SyncEngineJournal.abandonedAfter * 2)], ofItemAtPath: journal.file(ours.lineage).path)
        journal.removeAbandoned(keeping: ours.lineage, now: now)
        #expect(!FileManager.default.fileExists(atPath: journal.sharedFile.path))
        #expect(journal.read(lineage: ours.lineage) != nil, "its own journal stays, however old")
        for lineage in newest + [eighth] { #expect(journal.read(lineage: lineage) != nil) }
        #expect(journal.read(lineage: ninth) == nil)
        #expect(journal.read(lineage: stale) == nil)

        // With fewer than eight, age alone decides.
        let young = try other(SyncEngineJournal.abandonedAfter - 60)
        let old = try other(SyncEngineJournal.abandonedAfter + 60)
        for lineage in newest { try FileManager.default.removeItem(at: journal.file(lineage)) }
        journal.removeAbandoned(keeping: ours.lineage, now: now)
        #expect(journal.read(lineage: young) != nil)
        #expect(journal.read(lineage: old) == nil)
    }

    @Test("a change that stays pending after a failure the engine retries goes behind the changes not yet tried")
    func requeueKeepsUntriedFirst() {
        let state = CKSyncEngine.State(
            CKSyncEngine.State.Stored(containerIdentifier: "iCloud.test", databaseScope: "private"), journal: nil)
        state.add(pendingRecordZoneChanges: ["a", "b", "c"].map { .saveRecord(Self.id($0)) })
        state.requeue([.saveRecord(Self.id("a")), .saveRecord(Self.id("gone"))])
        expectEqual(state.pendingRecordZoneChanges, ["b", "c", "a"].map { .saveRecord(Self.id($0)) })
    }

    @Test(
        "a conflict fails the loser's send with serverRecordChanged and the server's record; one change stays pending, the next send settles it",
        arguments: [true, false])
    func conflict(winnerSavesFirst: Bool) async throws {
        try await TestServer.with { server in
            let (a, b) = try await Self.devicesHoldingOneNote(server)

            a.edit("n", "A's edit")
            b.edit("n", "B's edit")
            let (first, second) = winnerSavesFirst ? (a, b) : (b, a)
            let firstText = first.notes["n"] ?? ""
            let secondText = second.notes["n"] ?? ""
            try await first.engine.sendChanges()
            let thrown = await #expect(throws: CKError.self) { try await second.engine.sendChanges() }
            expectEqual(thrown?.code, .partialFailure)
            let conflict = Self.itemError(thrown, "n")
            expectEqual(conflict?.code, .serverRecordChanged)
            #expect(conflict?.serverRecord?.recordChangeTag != nil)
            expectEqual(second.failures, ["n: serverRecordChanged"])
            // The first sender is done; the second has the one change its app added again.
            #expect(first.engine.state.pendingRecordZoneChanges.isEmpty)
            expectEqual(second.engine.state.pendingRecordZoneChanges, [.saveRecord(Self.id("n"))])
            expectEqual(second.notes["n"], "\(firstText) + \(secondText)")

            try await second.engine.sendChanges()
            #expect(second.engine.state.pendingRecordZoneChanges.isEmpty)
            try await first.engine.fetchChanges()
            expectEqual(first.notes["n"], "\(firstText) + \(secondText)")
            expectEqual(first.notes, second.notes)
        }
    }

    @Test(
        "an atomic zone batch with one conflict: that record fails serverRecordChanged, the others batchRequestFailed and stay pending for the engine to send again; nothing of the batch is applied"
    )
    func atomicBatchWithAConflict() async throws {
        try await TestServer.with { server in
            let (a, b) = try await Self.devicesHoldingOneNote(server)

            a.edit("n", "A's edit")
            try await a.engine.sendChanges()
            b.atomicByZone = true
            b.edit("n", "B's edit")
            b.edit("m", "new on B")
            b.edit("o", "also new on B")
            let thrown = await #expect(throws: CKError.self) { try await b.engine.sendChanges() }
            expectEqual(Self.itemError(thrown, "n")?.code, .serverRecordChanged)
            expectEqual(Self.itemError(thrown, "m")?.code, .batchRequestFailed)
            expectEqual(Self.itemError(thrown, "o")?.code, .batchRequestFailed)
            expectEqual(Set(b.failures), ["n: serverRecordChanged", "m: batchRequestFailed", "o: batchRequestFailed"])
            // All three pending: the conflict because the app merged and added it again, the
            // others because the engine sends them again by itself.
            expectEqual(Set(b.engine.state.pendingRecordZoneChanges), Set(["n", "m", "o"].map { .saveRecord(Self.id($0)) }))
            let c = try await Self.freshDevice(server)
            expectEqual(c.notes, ["n": "A's edit"])

            try await b.engine.sendChanges()
            #expect(b.engine.state.pendingRecordZoneChanges.isEmpty)
            try await c.engine.fetchChanges()
            expectEqual(c.notes, ["n": "A's edit + B's edit", "m": "new on B", "o": "also new on B"])
        }
    }

    @Test("a zone deleted by another device fails the next send with zoneNotFound; the app saves the zone and the record anew")
    func zoneDeletedElsewhere() async throws {
        try await TestServer.with { server in
            let devices = try await Self.devices(server, "A", "B")
            let (a, other) = (devices[0], devices[1])
            // As Apple's sample does before every test: deleting a zone that is not there
            // (a fresh container) succeeds, by the engine and by the database alike.
            let database = other.container.privateCloudDatabase
            try await expectEqual(database.deleteRecordZone(withID: Self.zoneID), Self.zoneID)
            a.engine.state.add(pendingDatabaseChanges: [.deleteZone(Self.zoneID)])
            try await a.engine.sendChanges()
            #expect(a.events.contains("sentDatabaseChanges(saved: 0, failed: 0, deleted: 1)"), "\(a.events)")

            a.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
            a.edit("n", "before")
            try await a.engine.sendChanges()
            let created = try #require(a.serverRecord("n")?.creationDate)

            server.clock.advance(milliseconds: 1_000)  // the test server's clock moves when told
            try await database.deleteRecordZone(withID: Self.zoneID)
            a.edit("n", "renamed")
            let thrown = await #expect(throws: CKError.self) { try await a.engine.sendChanges() }
            expectEqual(Self.itemError(thrown, "n")?.code, .zoneNotFound)
            expectEqual(a.failures.last, "n: zoneNotFound")
            // Nothing repaired behind the app's back: pending is what the app added again.
            expectEqual(a.engine.state.pendingDatabaseChanges.map(\.zoneID), [Self.zoneID])
            expectEqual(a.engine.state.pendingRecordZoneChanges, [.saveRecord(Self.id("n"))])

            try await a.engine.sendChanges()
            #expect(a.engine.state.pendingRecordZoneChanges.isEmpty && a.engine.state.pendingDatabaseChanges.isEmpty)
            let c = try await Self.freshDevice(server)
            expectEqual(c.notes, ["n": "renamed"])
            let recreated = try #require(c.serverRecord("n")?.creationDate)
            #expect(recreated > created)
        }
    }

    @Test("a record deleted by another device fails the next save with unknownItem; the app sends it anew")
    func recordDeletedElsewhere() async throws {
        try await TestServer.with { server in
            let devices = try await Self.devices(server, "A", "B")
            let (a, other) = (devices[0], devices[1])
            a.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
            a.edit("n", "before")
            a.edit("kept", "untouched")
            try await a.engine.sendChanges()
            let created = try #require(a.serverRecord("n")?.creationDate)

            server.clock.advance(milliseconds: 1_000)  // the test server's clock moves when told
            _ = try await other.container.privateCloudDatabase.deleteRecord(withID: Self.id("n"))
            a.edit("n", "renamed")
            a.edit("kept", "edited too")
            let thrown = await #expect(throws: CKError.self) { try await a.engine.sendChanges() }
            expectEqual(Self.itemError(thrown, "n")?.code, .unknownItem)
            #expect(Self.itemError(thrown, "kept") == nil)
            expectEqual(thrown?.partialErrorsByItemID?.count, 1)
            expectEqual(a.engine.state.pendingRecordZoneChanges, [.saveRecord(Self.id("n"))])

            try await a.engine.sendChanges()
            let c = try await Self.freshDevice(server)
            expectEqual(c.notes, ["n": "renamed", "kept": "edited too"])
            #expect(try #require(c.serverRecord("n")?.creationDate) > created)
        }
    }

    @Test(
        "an app that makes its engine twice (lazily at first use, and from work already waiting for its actor) hears of the sign-in on the engine it made first, and sends with it"
    )
    func engineMadeTwice() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            var configuration = server.configuration(user: "ann")
            configuration.longLivedOperationDirectory = FileManager.default.temporaryDirectory
                .appendingPathComponent("sync-twice-\(UUID().uuidString)")
            let app = LazyEngineApp(CKContainer(configuration: configuration))
            // The container's session knows the user, as after any earlier request.
            _ = try await app.container.userRecordID()
            let first = await app.firstEditWithAnotherEngineOnItsWay("n", "hello")
            try await first.sendChanges()
            // The sign-in went to the engine the app had then: it carried the zone, and the
            // record was saved with it; the engine made afterwards heard of it only as a
            // continuation of the kept state.
            let order = await app.order
            expectEqual(Array(order.prefix(3)), ["engine 1 made", "signIn on engine 1 (the app's)", "engine 2 made"], "\(order)")
            let saved = try await app.container.privateCloudDatabase.record(for: Self.id("n"))
            #expect(saved["text"] as? String == "hello")
        }
    }
}

/// An app in the shape of Apple's CKSyncEngine sample: an actor that makes its engine lazily
/// at first use and again from work it queued on itself before (the sample's initializer
/// starts a `Task` that does), and whose sign-in handler adds the zone, and every note again,
/// to whichever engine it holds then.
actor LazyEngineApp: CKSyncEngineDelegate {
    let container: CKContainer
    private var engine: CKSyncEngine?
    private var kept: CKSyncEngine.State.Serialization?
    private var notes: [String: String] = [:]
    private(set) var order: [String] = []

    init(_ container: CKContainer) { self.container = container }

    private var enginesMade: Int { order.filter { $0.hasSuffix("made") }.count }

    private var syncEngine: CKSyncEngine {
        if engine == nil { makeEngine() }
        return engine!
    }

    private func makeEngine() {
        var configuration = CKSyncEngine.Configuration(
            database: container.privateCloudDatabase, stateSerialization: kept, delegate: self)
        configuration.automaticallySync = false
        engine = CKSyncEngine(configuration)
        order.append("engine \(enginesMade + 1) made")
    }

    /// The sample's first use: work that makes an engine is already waiting for this actor (at
    /// the caller's priority) when the edit makes one lazily. Returns the engine the edit used.
    func firstEditWithAnotherEngineOnItsWay(_ name: String, _ text: String) -> CKSyncEngine {
        Task { self.makeEngine() }
        notes[name] = text
        let engine = syncEngine
        engine.state.add(pendingRecordZoneChanges: [.saveRecord(SyncEngineKitTests.id(name))])
        return engine
    }

    func handleEvent(_ event: CKSyncEngine.Event, syncEngine: CKSyncEngine) async {
        switch event {
        case .stateUpdate(let update):
            kept = update.stateSerialization
        case .accountChange(let change):
            guard case .signIn = change.changeType else { return }
            let held = self.syncEngine
            order.append("signIn on engine \(enginesMade)\(held === syncEngine ? " (the app's)" : "")")
            held.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: SyncEngineKitTests.zoneID))])
            held.state.add(pendingRecordZoneChanges: notes.keys.map { .saveRecord(SyncEngineKitTests.id($0)) })
        default:
            break
        }
    }

    func nextRecordZoneChangeBatch(_ context: CKSyncEngine.SendChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.RecordZoneChangeBatch?
    {
        let pending = syncEngine.state.pendingRecordZoneChanges.filter { context.options.scope.contains($0) }
        let notes = self.notes
        return await CKSyncEngine.RecordZoneChangeBatch(pendingChanges: pending) { id in
            guard let text = notes[id.recordName] else { return nil }
            let record = CKRecord(recordType: "Note", recordID: id)
            record["text"] = text
            return record
        }
    }
}
