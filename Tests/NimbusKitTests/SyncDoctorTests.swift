import Foundation
import NimbusTestSupport
import NimbusTesting
import NimbusWire
import Testing

/// The sync doctor (issue 41, docs/sync-doctor.md): what each device was served, and from it
/// how far behind a device is per zone, the pushes it missed, tokens the store no longer
/// honours; kept for its retention.
@Suite("The sync doctor")
struct SyncDoctorTests {
    static func report(_ server: NimbusTestServer) async throws -> [String: DeviceSyncReport.Device] {
        try await server.service.flushDeviceSync()
        let report = try await server.service.deviceSyncReport(container: server.containerIdentifier, environment: .development, userName: "alice")
        return Dictionary(uniqueKeysWithValues: report.devices.map { ($0.deviceID, $0) })
    }

    @Test("a device that missed a push is behind in one zone until it fetches; a zone made again expires its token; retention forgets it")
    func missedPushAndBehind() async throws {
        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            let laptop = try await server.device(of: "alice", named: "laptop")
            let reader = try await SubscriptionKitTests.connectedReader(phone, probe: laptop)
            defer { reader.stop() }
            let database = phone.privateCloudDatabase
            _ = try await database.save(CKDatabaseSubscription(subscriptionID: "all"))
            let notes = CKRecordZone(zoneName: "Notes")
            _ = try await database.save(notes)
            _ = try await database.save(CKRecordZone(zoneName: "Photos"))
            var token = try await database.recordZoneChanges(inZoneWith: notes.zoneID, since: nil).changeToken
            _ = try await database.databaseChanges(since: nil)

            var devices = try await Self.report(server)
            let phoneID = "alice-device-1"
            expectEqual(devices[phoneID]?.zone("Notes")?.status, .current)
            let neverFetched = devices[phoneID]?.zonesNeverFetched ?? []
            #expect(neverFetched.contains("Photos") && !neverFetched.contains("Notes") && !neverFetched.contains("_defaultZone"))
            expectEqual(devices[phoneID]?.database?.status, .current)

            // The laptop writes; the phone's push is dropped.
            try await server.switchOn(Fault(.pushDropped, user: "alice"))
            let note = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n1", zoneID: notes.zoneID))
            note["text"] = "from the laptop"
            _ = try await laptop.privateCloudDatabase.save(note)
            try await Task.sleep(for: .milliseconds(500))  // the notification pipeline runs every 250 ms at the latest
            devices = try await Self.report(server)
            expectEqual(devices[phoneID]?.zone("Notes")?.status, .behind)
            expectEqual(devices[phoneID]?.zone("Notes")?.behind, 1)
            expectEqual(devices[phoneID]?.push.missed, 1, "\(String(describing: devices[phoneID]))")
            expectEqual(devices[phoneID]?.database?.status, .behind)

            // The phone fetches: in step again, and the missed push no longer matters.
            token = try await database.recordZoneChanges(inZoneWith: notes.zoneID, since: token).changeToken
            _ = try await database.databaseChanges(since: nil)
            devices = try await Self.report(server)
            expectEqual(devices[phoneID]?.zone("Notes")?.status, .current)
            expectEqual(devices[phoneID]?.zone("Notes")?.behind, 0)
            expectEqual(devices[phoneID]?.push.missed, 0)

            // A push that arrives is noted as sent.
            let second = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n2", zoneID: notes.zoneID))
            _ = try await laptop.privateCloudDatabase.save(second)
            _ = try await reader.next(within: 10)
            devices = try await Self.report(server)
            #expect(devices[phoneID]?.push.lastSentAt != nil)
            expectEqual(devices[phoneID]?.push.missed, 0, "a push that was sent is not missed")

            // The zone deleted and made again: the phone's token is one the store no longer honours.
            _ = try await laptop.privateCloudDatabase.deleteRecordZone(withID: notes.zoneID)
            _ = try await laptop.privateCloudDatabase.save(notes)
            devices = try await Self.report(server)
            expectEqual(devices[phoneID]?.zone("Notes")?.status, .expired)

            // Unknown users are a clear answer; retention forgets devices not seen for 30 days.
            await #expect(throws: CloudKitError.self) {
                _ = try await server.service.deviceSyncReport(container: server.containerIdentifier, environment: .development, userName: "nobody")
            }
            try await Task.sleep(for: .milliseconds(500))  // the pushes of the zone's changes
            try await server.service.flushDeviceSync()
            server.advanceClock(by: .seconds(29 * 86_400))
            try await expectEqual(server.service.pruneDeviceSync(), 0)
            server.advanceClock(by: .seconds(2 * 86_400))
            #expect(try await server.service.pruneDeviceSync() >= 1)
            #expect(try await Self.report(server)[phoneID] == nil)
        }
    }
}
