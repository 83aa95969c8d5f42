// "Introducing CloudKit" (WWDC 2014, session 208): the slides' Objective-C samples in today's
// Swift. Only the import differs from a CloudKit app.
import NimbusKit

enum IntroducingCloudKit2014 {
    static func databases() -> (CKDatabase, CKDatabase) {
        let publicDatabase = CKContainer.default().publicCloudDatabase
        let privateDatabase = CKContainer.default().privateCloudDatabase
        return (publicDatabase, privateDatabase)
    }

    /// Setting and reading values.
    static func partyValues() -> (CKRecord, String?, Date?) {
        let party = CKRecord(recordType: "Party")
        // setting values
        party.setObject("Post Presentation Beers" as NSString, forKey: "summary")
        let startDate = Date(timeIntervalSinceNow: 30.0 * 60.0)
        party["start"] = startDate
        // accessing values
        let summary = party.object(forKey: "summary") as? String
        let start = party["start"] as? Date
        return (party, summary, start)
    }

    static func wellKnownParty() -> CKRecord {
        let wellKnownID = CKRecord.ID(recordName: "WellKnownParty")
        let party = CKRecord(recordType: "Party", recordID: wellKnownID)
        return party
    }

    /// A clown points at its party, by record or by a well-known ID.
    static func clowns(party: CKRecord) -> (CKRecord, CKRecord) {
        let clown = CKRecord(recordType: "Clown")
        let partyReference = CKRecord.Reference(record: party, action: .none)
        clown["party"] = partyReference

        let otherClown = CKRecord(recordType: "Clown")
        let wellKnownID = CKRecord.ID(recordName: "WellKnownParty")
        let wellKnownReference = CKRecord.Reference(recordID: wellKnownID, action: .none)
        otherClown["party"] = wellKnownReference
        return (clown, otherClown)
    }

    static func attachScreenplay(to party: CKRecord, screenplayURL: URL) {
        let screenplay = CKAsset(fileURL: screenplayURL)
        party["screenplay"] = screenplay
    }

    /// Saving a record with the convenience API.
    static func saveParty(completion: @escaping @Sendable (CKRecord?, (any Error)?) -> Void) {
        let wellKnownID = CKRecord.ID(recordName: "WellKnownParty")
        let party = CKRecord(recordType: "Party", recordID: wellKnownID)
        party["end"] = Date(timeIntervalSinceNow: 60 * 60)
        let publicDatabase = CKContainer.default().publicCloudDatabase
        publicDatabase.save(party) { savedParty, error in
            // appropriate error handling when (error != nil)
            completion(savedParty, error)
        }
    }

    /// Fetching a record.
    static func fetchParty(completion: @escaping @Sendable (CKRecord?, (any Error)?) -> Void) {
        let defaultContainer = CKContainer.default()
        let publicDatabase = defaultContainer.publicCloudDatabase
        let wellKnownID = CKRecord.ID(recordName: "WellKnownParty")
        publicDatabase.fetch(withRecordID: wellKnownID) { fetchedParty, error in
            // truly marvelous error handling when (error != nil)
            completion(fetchedParty, error)
        }
    }

    /// Saving a modified record: fetch, push the end back half an hour, save.
    static func extendParty(completion: @escaping @Sendable (CKRecord?, (any Error)?) -> Void) {
        let publicDatabase = CKContainer.default().publicCloudDatabase
        let wellKnownID = CKRecord.ID(recordName: "WellKnownParty")
        publicDatabase.fetch(withRecordID: wellKnownID) { fetchedParty, error in
            guard let fetchedParty, error == nil else {
                completion(nil, error)
                return
            }
            let endDate = fetchedParty["end"] as! Date
            fetchedParty["end"] = endDate.addingTimeInterval(30.0 * 60.0)
            publicDatabase.save(fetchedParty) { savedParty, saveError in
                // error handling to make your mother proud when (error != nil)
                completion(savedParty, saveError)
            }
        }
    }

    /// The slides' predicates, each a valid CloudKit predicate.
    static func predicates(partyName: String, dynamicKey: String, value: String) -> [NSPredicate] {
        let location = CLLocation(latitude: 37.783, longitude: -122.404)
        return [
            NSPredicate(format: "name = %@", partyName),
            NSPredicate(format: "%K = %@", dynamicKey, value),
            NSPredicate(format: "start > %@", Date() as NSDate),
            NSPredicate(format: "distanceToLocation:fromLocation:(Location, %@) < 100", location),
            NSPredicate(format: "ALL tokenize(%@, 'Cdl') IN allTokens", "after session"),
        ]
    }

    /// Creating and performing a query.
    static func upcomingParties(completion: @escaping @Sendable ([CKRecord]?, (any Error)?) -> Void) {
        let predicate = NSPredicate(format: "start > %@", Date() as NSDate)
        let query = CKQuery(recordType: "Party", predicate: predicate)
        let publicDatabase = CKContainer.default().publicCloudDatabase
        publicDatabase.perform(query, inZoneWith: nil) { results, error in
            // astounding error handling when (error != nil)
            if error == nil, let results {
                print("Fetch \(results.count) results")
                for record in results {
                    print("Found matching party \(record)")
                }
            }
            completion(results, error)
        }
    }

    /// The user record ID: stable, scoped to the container.
    static func userID(completion: @escaping @Sendable (CKRecord.ID?, (any Error)?) -> Void) {
        CKContainer.default().fetchUserRecordID { userRecordID, error in
            // ostentatious error handling when (error != nil)
            completion(userRecordID, error)
        }
    }
}
