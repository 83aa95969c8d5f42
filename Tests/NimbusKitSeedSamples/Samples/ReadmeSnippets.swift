// The README's "An app on NimbusKit" snippets, verbatim inside functions, so the README's
// code is known to compile and run.
import NimbusKit

enum ReadmeSnippets {
    static func firstSave() async throws -> (CKDatabase, CKRecordZone) {
        let database = CKContainer.default().privateCloudDatabase
        let zone = try await database.save(CKRecordZone(zoneName: "Parties"))
        let party = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "wwdc", zoneID: zone.zoneID))
        party["name"] = "Post Presentation Beers"
        party["start"] = Date(timeIntervalSinceNow: 30 * 60)
        party["guests"] = 12
        let saved = try await database.save(party)          // the server's copy, with its change tag
        saved["guests"] = 13
        _ = try await database.save(saved)                   // a stale copy would throw serverRecordChanged
        return (database, zone)
    }

    static func firstQuery(_ database: CKDatabase, _ zone: CKRecordZone) async throws {
        let query = CKQuery(recordType: "Party", predicate: NSPredicate(format: "start > %@ AND guests >= %@", Date() as NSDate, 10 as NSNumber))
        query.sortDescriptors = [NSSortDescriptor(key: "start", ascending: true)]
        var (results, cursor) = try await database.records(matching: query, inZoneWith: zone.zoneID, resultsLimit: 20)
        while true {
            for (_, result) in results { print(try result.get()["name"] ?? "") }
            guard let next = cursor else { break }
            (results, cursor) = try await database.records(continuingMatchFrom: next)
        }
    }

    static func firstSync(_ database: CKDatabase) async throws -> [CKRecordZone.ID: CKServerChangeToken] {
        var databaseToken: CKServerChangeToken? = nil, zoneTokens: [CKRecordZone.ID: CKServerChangeToken] = [:]
        let changes = try await database.databaseChanges(since: databaseToken)
        for zoneID in changes.modifications.map(\.zoneID) {
            var more = true
            while more {
                let page = try await database.recordZoneChanges(inZoneWith: zoneID, since: zoneTokens[zoneID])
                for (_, result) in page.modificationResultsByID { print("changed", try result.get().record.recordID) }
                for deletion in page.deletions { print("deleted", deletion.recordID) }
                (zoneTokens[zoneID], more) = (page.changeToken, page.moreComing)
            }
        }
        databaseToken = changes.changeToken
        _ = databaseToken
        return zoneTokens
    }

    static func firstSubscription(_ database: CKDatabase) async throws {
        let subscription = CKDatabaseSubscription(subscriptionID: "private-changes")
        let info = CKSubscription.NotificationInfo()
        info.shouldSendContentAvailable = true               // silent: fetch, show nothing
        subscription.notificationInfo = info
        _ = try await database.save(subscription)
        for try await notification in CKContainer.default().notifications where notification.subscriptionID == "private-changes" {
            print("changed elsewhere:", notification.notificationID ?? "")   // now run "First sync" again
            break
        }
    }
}
