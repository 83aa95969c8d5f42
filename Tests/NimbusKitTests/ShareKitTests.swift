import Foundation
import NimbusKit
import NimbusStorage
import NimbusTestSupport
import Testing

/// Sharing as an app meets it (issue 19): `CKShare` saved with its root, a share URL resolved
/// and accepted (async and callback forms), and the shared database.
@Suite("NimbusKit sharing")
struct ShareKitTests {
    /// A user with an email address whose device has signed in once (so they are a member of
    /// the container, as a real invitee who installed the app is).
    static func person(_ server: TestServer, _ name: String) async throws -> CKContainer {
        _ = try await server.service.createUser(
            name: name, password: "password-\(name)",
            profile: UserProfile(emailAddress: "\(name)@example.com", nameComponents: .init(givenName: name.capitalized)))
        let container = server.device(of: name)
        _ = try await container.userRecordID()
        return container
    }

    @Test("a CKShare saved with its root; the invitees resolve, accept and use the shared database")
    func shareStory() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann")
            let bob = try await Self.person(server, "bob")
            let carol = try await Self.person(server, "carol")
            let annID = try await ann.userRecordID()
            let zone = try await ann.privateCloudDatabase.save(CKRecordZone(zoneName: "Trip"))
            let root = CKRecord(recordType: "Plan", recordID: CKRecord.ID(recordName: "plan", zoneID: zone.zoneID))
            root["title"] = "Lisbon"

            // Ann shares the plan with Bob (read-write) and Carol (read-only).
            let share = CKShare(rootRecord: root)
            share[CKShare.SystemFieldKey.title] = "Lisbon trip"
            let bobInvite = try await ann.shareParticipant(forEmailAddress: "bob@example.com")
            bobInvite.permission = .readWrite
            share.addParticipant(bobInvite)
            let lookup = CKFetchShareParticipantsOperation(userIdentityLookupInfos: [CKUserIdentity.LookupInfo(emailAddress: "carol@example.com")])
            let found = Box<[CKShare.Participant]>([])
            lookup.perShareParticipantResultBlock = { _, result in if case .success(let participant) = result { found.update { $0.append(participant) } } }
            await runContainerOperation(lookup, on: ann)
            for participant in found.value { share.addParticipant(participant) }
            let modify = CKModifyRecordsOperation(recordsToSave: [share, root])
            let saved = Box<[CKRecord]>([])
            modify.perRecordSaveBlock = { _, result in if case .success(let record) = result { saved.update { $0.append(record) } } }
            await runOperation(modify, on: ann.privateCloudDatabase)
            let savedShare = try #require(saved.value.compactMap { $0 as? CKShare }.first, "\(saved.value)")
            let url = try #require(savedShare.url)
            expectEqual(savedShare.participants.count, 3)
            #expect(savedShare.owner.role == .owner && savedShare.currentUserParticipant?.role == .owner)
            #expect(savedShare[CKShare.SystemFieldKey.title] as? String == "Lisbon trip")
            let savedRoot = try await ann.privateCloudDatabase.record(for: root.recordID)
            expectEqual(savedRoot.share?.recordID, savedShare.recordID)
            // Archived with its system fields, as an app caches it, the share comes back whole.
            let archiver = NSKeyedArchiver(requiringSecureCoding: true)
            savedShare.encodeSystemFields(with: archiver)
            archiver.finishEncoding()
            let unarchiver = try NSKeyedUnarchiver(forReadingFrom: archiver.encodedData)
            let restored = try #require(CKShare(coder: unarchiver))
            #expect(restored.participants.count == 3 && restored.url == url && restored.recordChangeTag == savedShare.recordChangeTag)
            #expect(restored.currentUserParticipant?.role == .owner && restored.owner.role == .owner)
            expectEqual(Set(restored.participants.map(\.participantID)), Set(savedShare.participants.map(\.participantID)))

            // Bob, async: the metadata, then accept.
            let metadata = try await bob.shareMetadata(for: url, shouldFetchRootRecord: true)
            #expect(metadata.participantStatus == .pending && metadata.participantPermission == .readWrite)
            expectEqual(metadata.participantRole, .privateUser)
            #expect(metadata.rootRecord?["title"] as? String == "Lisbon")
            expectEqual(metadata.hierarchicalRootRecordID?.recordName, "plan")
            #expect(metadata.ownerIdentity.userRecordID?.recordName == annID.recordName || metadata.ownerIdentity.userRecordID != nil)
            let accepted = try await bob.accept(metadata)
            expectEqual(accepted.currentUserParticipant?.acceptanceStatus, .accepted)

            // Carol, with the operations' blocks.
            let fetch = CKFetchShareMetadataOperation(shareURLs: [url])
            let carolsMetadata = Box<CKShare.Metadata?>(nil)
            fetch.perShareMetadataResultBlock = { _, result in carolsMetadata.update { $0 = try? result.get() } }
            await runContainerOperation(fetch, on: carol)
            let acceptOperation = CKAcceptSharesOperation(shareMetadatas: [try #require(carolsMetadata.value)])
            let carolsShare = Box<CKShare?>(nil)
            acceptOperation.perShareCompletionBlock = { _, share, _ in carolsShare.update { $0 = share } }
            await runContainerOperation(acceptOperation, on: carol)
            expectEqual(carolsShare.value?.currentUserParticipant?.permission, .readOnly)

            // The shared database: Ann's zone under her name, the plan in it; Bob adds a day.
            let zones = try await bob.sharedCloudDatabase.allRecordZones()
            let sharedZone = try #require(zones.first)
            #expect(zones.count == 1 && sharedZone.zoneID.zoneName == "Trip" && sharedZone.zoneID.ownerName == annID.recordName)
            let changes = try await bob.sharedCloudDatabase.recordZoneChanges(inZoneWith: sharedZone.zoneID, since: nil)
            let names = Set(changes.modificationResultsByID.keys.map(\.recordName))
            #expect(names.contains("plan"), "\(names)")
            let day = CKRecord(recordType: "Day", recordID: CKRecord.ID(recordName: "day1", zoneID: sharedZone.zoneID))
            day.setParent(CKRecord.ID(recordName: "plan", zoneID: sharedZone.zoneID))
            day["title"] = "Alfama"
            _ = try await bob.sharedCloudDatabase.save(day)
            let inAnns = try await ann.privateCloudDatabase.record(for: CKRecord.ID(recordName: "day1", zoneID: zone.zoneID))
            #expect(inAnns["title"] as? String == "Alfama")
            // Carol reads only.
            let carolsDay = CKRecord(recordType: "Day", recordID: CKRecord.ID(recordName: "day2", zoneID: sharedZone.zoneID))
            carolsDay.setParent(CKRecord.ID(recordName: "plan", zoneID: sharedZone.zoneID))
            await expectCKError(.permissionFailure) { _ = try await carol.sharedCloudDatabase.save(carolsDay) }
        }
    }

    @Test("completion-handler forms of the container's share calls")
    func callbacks() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann")
            let bob = try await Self.person(server, "bob")
            let zone = try await ann.privateCloudDatabase.save(CKRecordZone(zoneName: "Album"))
            let share = CKShare(recordZoneID: zone.zoneID)
            share.addParticipant(try await ann.shareParticipant(forEmailAddress: "bob@example.com"))
            let saved = try #require(try await ann.privateCloudDatabase.save(share) as? CKShare)
            expectEqual(saved.recordID.recordName, "cloudkit.zoneshare")
            let url = try #require(saved.url)
            let metadata: CKShare.Metadata = try await withCheckedThrowingContinuation { continuation in
                bob.fetchShareMetadata(with: url) { metadata, error in
                    if let metadata { continuation.resume(returning: metadata) } else { continuation.resume(throwing: error!) }
                }
            }
            #expect(metadata.hierarchicalRootRecordID == nil)
            let accepted: CKShare = try await withCheckedThrowingContinuation { continuation in
                bob.accept(metadata) { share, error in
                    if let share { continuation.resume(returning: share) } else { continuation.resume(throwing: error!) }
                }
            }
            expectEqual(accepted.currentUserParticipant?.acceptanceStatus, .accepted)
            let sharedZones = try await bob.sharedCloudDatabase.allRecordZones()
            expectEqual(sharedZones.map(\.zoneID.zoneName), ["Album"])
            expectEqual(sharedZones.first?.share?.recordID.recordName, "cloudkit.zoneshare", "CKRecordZone.share")
            let annsZone = try await ann.privateCloudDatabase.recordZone(for: zone.zoneID)
            expectEqual(annsZone.share?.recordID, saved.recordID)
            #expect(annsZone.capabilities.contains(.sharing))
        }
    }

    @Test("participant lookups ask the server: an unknown address fails, a discoverable person comes with their name")
    func participantLookupsAskTheServer() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann")
            let bob = try await Self.person(server, "bob")
            let bobID = try await bob.userRecordID()
            // Bob has not made himself discoverable: found, without a name.
            let quiet = try await ann.shareParticipant(forEmailAddress: "BOB@example.com")
            expectEqual(quiet.userIdentity.userRecordID?.recordName, bobID.recordName)
            #expect(quiet.userIdentity.nameComponents?.givenName == nil)
            try await expectEqual(bob.requestApplicationPermission(.userDiscoverability), .granted)
            let named = try await ann.shareParticipant(forUserRecordID: bobID)
            expectEqual(named.userIdentity.nameComponents?.givenName, "Bob")
            await expectCKError(.unknownItem) { _ = try await ann.shareParticipant(forEmailAddress: "nobody@example.com") }
            await expectCKError(.unknownItem) { _ = try await ann.shareParticipant(forPhoneNumber: "+15555550100") }

            // The operation: one result per lookup, the unknown one failed, the whole a partial failure.
            let operation = CKFetchShareParticipantsOperation(userIdentityLookupInfos: [
                CKUserIdentity.LookupInfo(emailAddress: "bob@example.com"), CKUserIdentity.LookupInfo(emailAddress: "nobody@example.com"),
            ])
            let results = Box<[String: Bool]>([:])
            let final = Box<(any Error)?>(nil)
            operation.perShareParticipantResultBlock = { info, result in
                results.update { $0[info.emailAddress ?? ""] = (try? result.get()) != nil }
            }
            operation.fetchShareParticipantsResultBlock = { result in if case .failure(let error) = result { final.update { $0 = error } } }
            await runContainerOperation(operation, on: ann)
            expectEqual(results.value, ["bob@example.com": true, "nobody@example.com": false])
            expectEqual((final.value as? CKError)?.code, .partialFailure)
        }
    }
}

/// Runs a container operation and waits for it to finish.
func runContainerOperation(_ operation: CKOperation, on container: CKContainer) async {
    await withCheckedContinuation { continuation in
        operation.completionBlock = { continuation.resume() }
        container.add(operation)
    }
}
