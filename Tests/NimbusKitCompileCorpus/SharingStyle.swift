// Sharing as apps write it (the 2016 session and Apple's sharing samples): a share made for a
// root record and saved with it, participants by email, accepting from a URL (the scene
// delegate's `userDidAcceptCloudKitShareWith`), and the shared database.
import Foundation
import NimbusKit

enum SharingCode {
    static func share(_ list: CKRecord, in container: CKContainer) async throws -> URL? {
        let share = CKShare(rootRecord: list)
        share[CKShare.SystemFieldKey.title] = "Groceries" as CKRecordValue
        share[CKShare.SystemFieldKey.shareType] = "com.example.list" as CKRecordValue
        share.publicPermission = .none
        let participant = try await container.shareParticipant(forEmailAddress: "friend@example.com")
        participant.permission = .readWrite
        share.addParticipant(participant)
        let (results, _) = try await container.privateCloudDatabase.modifyRecords(saving: [list, share], deleting: [])
        let saved = try results[share.recordID]?.get() as? CKShare
        for person in saved?.participants ?? [] {
            print(person.role == .owner, person.permission == .readWrite, person.acceptanceStatus == .pending, person.userIdentity)
        }
        return saved?.url
    }

    static func zoneShare(_ zoneID: CKRecordZone.ID, in database: CKDatabase) {
        let share = CKShare(recordZoneID: zoneID)
        let operation = CKModifyRecordsOperation(recordsToSave: [share])
        operation.modifyRecordsResultBlock = { print($0) }
        database.add(operation)
    }

    /// What a scene delegate does with `CKShare.Metadata`.
    static func accept(_ url: URL, container: CKContainer) {
        let fetch = CKFetchShareMetadataOperation(shareURLs: [url])
        fetch.shouldFetchRootRecord = true
        fetch.perShareMetadataResultBlock = { _, result in
            guard case .success(let metadata) = result else { return }
            print(metadata.share.owner, metadata.hierarchicalRootRecordID as Any, metadata.participantStatus == .accepted)
            let accept = CKAcceptSharesOperation(shareMetadatas: [metadata])
            accept.perShareResultBlock = { metadata, result in print(metadata.containerIdentifier, result) }
            accept.acceptSharesResultBlock = { print($0) }
            container.add(accept)
        }
        container.add(fetch)
    }

    static func sharedZones(_ container: CKContainer) async throws -> [CKRecordZone] {
        let zones = try await container.sharedCloudDatabase.allRecordZones()
        for zone in zones { print(zone.zoneID.ownerName) }
        return zones
    }

    static func rootShare(_ record: CKRecord) -> CKRecord.ID? { record.share?.recordID }
}
