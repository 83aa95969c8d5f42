import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// The sync doctor over the admin API (issue 41, docs/sync-doctor.md), on each store: what a
/// device was served, stored and read back, merged across two flushes; an operator without
/// sight of the container sees nothing; a deleted user's devices go with them.
@Suite("the sync doctor's admin API")
struct DeviceSyncTests {
    static let container = TestServer.container

    @Test("a device behind in one zone, then in step; the report as the admin API gives it; gone with the user")
    func reportOverTheAdminAPI() async throws {
        try await TestServer.with { server in
            let browser = try await ConsoleTests.administrator(server)
            let alice = try await server.user("alice")
            let phone = alice.onDevice("phone")
            try await expectEqual(phone.createZone("Notes").status, 200)
            let first = try await phone.zoneChanges("Notes")
            let token = try #require(first.json["zones"]?[0]?["syncToken"]?.stringValue)
            _ = try await phone.databaseChanges()
            try await server.service.flushDeviceSync()

            // Another device writes twice: the phone is two changes behind.
            let laptop = alice.onDevice("laptop")
            try await expectEqual(laptop.modify(zone: "Notes", [Op.create("n1"), Op.create("n2")]).status, 200)
            try await server.service.flushDeviceSync()
            let path = "containers/\(Self.container)/users/alice/devices/development"
            var report = try await browser.get(path)
            expectEqual(report.status, 200, "\(report.text)")
            var device = try #require(report.json["devices"]?.arrayValue?.first { $0["deviceID"]?.stringValue == "phone" })
            expectEqual(device["zones"]?[0]?["zone"], "Notes")
            expectEqual(device["zones"]?[0]?["behind"], .int(2))
            expectEqual(device["database"]?["status"], "behind")
            expectEqual(report.json["retentionDays"], .int(30))

            // It fetches from its token: in step, the earlier position merged with the new one.
            try await expectEqual(phone.zoneChanges("Notes", token: token).status, 200)
            try await server.service.flushDeviceSync()
            report = try await browser.get(path)
            device = try #require(report.json["devices"]?.arrayValue?.first { $0["deviceID"]?.stringValue == "phone" })
            expectEqual(device["zones"]?[0]?["status"], "current")
            #expect(device["database"]?["fetchedAt"] != nil, "the database position kept from the earlier flush")

            // Bad names are clear answers.
            try await expectEqual(browser.get("containers/\(Self.container)/users/nobody/devices/development").status, 404)
            try await expectEqual(browser.get("containers/\(Self.container)/users/alice/devices/staging").status, 400)

            // The user deleted: their devices' positions go with them.
            let userID = try #require(try await server.service.users().first { $0.0.name == "alice" }?.0.id)
            let owner = NotificationOwner(container: Self.container, environment: .development, userID: userID)
            try await expectEqual(server.directory.storage.push.deviceSyncStates(owner: owner).count, 1)
            try await expectEqual(browser.post("containers/\(Self.container)/users/alice/delete", [:]).status, 200)
            #expect(try await server.directory.storage.push.deviceSyncStates(owner: owner).isEmpty)
        }
    }
}
