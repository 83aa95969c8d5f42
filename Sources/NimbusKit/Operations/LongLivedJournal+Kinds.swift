import Foundation
import NimbusWire

// What each kind of long-lived operation keeps in its journal, and how it is rebuilt from it
// (`LongLivedJournal.operation(from:container:)`). Records are journaled by
// `CKModifyRecordsOperation` and `CKFetchRecordsOperation` themselves; the kinds here keep
// their arguments: zone IDs, zones, change tokens, queries and cursors as their own archives,
// subscriptions and share metadata in the wire's shape, the rest as plain values.

extension CKFetchRecordZoneChangesOperation: LongLivedJournaling {
    static let journalKind = "fetchRecordZoneChanges"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["recordZoneIDs"] = try LongLivedJournal.archives(recordZoneIDs ?? [])
        journal["configurations"] = .array(
            try (configurationsByRecordZoneID ?? [:]).sorted { $0.key.zoneName < $1.key.zoneName }.map { zoneID, configuration throws(CKError) in
                var entry: JSONObject = ["zoneID": try LongLivedJournal.archive(zoneID), "resultsLimit": .int(Int64(configuration.resultsLimit))]
                if let token = configuration.previousServerChangeToken { entry["changeToken"] = try LongLivedJournal.archive(token) }
                if let keys = configuration.desiredKeys { entry["desiredKeys"] = .strings(keys) }
                return .object(entry)
            })
        journal["fetchAllChanges"] = .bool(fetchAllChanges)
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        recordZoneIDs = try LongLivedJournal.unarchives(CKRecordZone.ID.self, journal["recordZoneIDs"])
        var configurations: [CKRecordZone.ID: ZoneConfiguration] = [:]
        for entry in journal["configurations"]?.arrayValue ?? [] {
            guard let zoneID = try LongLivedJournal.unarchive(CKRecordZone.ID.self, entry["zoneID"]) else { continue }
            configurations[zoneID] = ZoneConfiguration(
                previousServerChangeToken: try LongLivedJournal.unarchive(CKServerChangeToken.self, entry["changeToken"]),
                resultsLimit: entry["resultsLimit"]?.int64Value.map(Int.init), desiredKeys: entry["desiredKeys"]?.arrayValue?.compactMap(\.stringValue))
        }
        configurationsByRecordZoneID = configurations
        fetchAllChanges = journal["fetchAllChanges"]?.boolValue ?? true
    }
}

extension CKFetchDatabaseChangesOperation: LongLivedJournaling {
    static let journalKind = "fetchDatabaseChanges"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        if let previousServerChangeToken { journal["changeToken"] = try LongLivedJournal.archive(previousServerChangeToken) }
        journal["resultsLimit"] = .int(Int64(resultsLimit))
        journal["fetchAllChanges"] = .bool(fetchAllChanges)
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        previousServerChangeToken = try LongLivedJournal.unarchive(CKServerChangeToken.self, journal["changeToken"])
        resultsLimit = journal["resultsLimit"]?.int64Value.map(Int.init) ?? 0
        fetchAllChanges = journal["fetchAllChanges"]?.boolValue ?? true
    }
}

extension CKFetchRecordChangesOperation: LongLivedJournaling {
    static let journalKind = "fetchRecordChanges"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        if let recordZoneID { journal["zoneID"] = try LongLivedJournal.archive(recordZoneID) }
        if let previousServerChangeToken { journal["changeToken"] = try LongLivedJournal.archive(previousServerChangeToken) }
        journal["resultsLimit"] = .int(Int64(resultsLimit))
        if let desiredKeys { journal["desiredKeys"] = .strings(desiredKeys) }
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        recordZoneID = try LongLivedJournal.unarchive(CKRecordZone.ID.self, journal["zoneID"])
        previousServerChangeToken = try LongLivedJournal.unarchive(CKServerChangeToken.self, journal["changeToken"])
        resultsLimit = journal["resultsLimit"]?.int64Value.map(Int.init) ?? 0
        desiredKeys = journal["desiredKeys"]?.arrayValue?.compactMap(\.stringValue)
    }
}

extension CKQueryOperation: LongLivedJournaling {
    static let journalKind = "query"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        if let query {
            // Checked now, so a query outside CloudKit's subset fails before it is journaled.
            _ = try query.queryJSON(currentUser: currentUser)
            journal["query"] = try LongLivedJournal.archive(query)
        }
        if let cursor { journal["cursor"] = try LongLivedJournal.archive(cursor) }
        if let zoneID { journal["zoneID"] = try LongLivedJournal.archive(zoneID) }
        journal["resultsLimit"] = .int(Int64(resultsLimit))
        if let desiredKeys { journal["desiredKeys"] = .strings(desiredKeys) }
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        query = try LongLivedJournal.unarchive(CKQuery.self, journal["query"])
        cursor = try LongLivedJournal.unarchive(CKQueryCursor.self, journal["cursor"])
        zoneID = try LongLivedJournal.unarchive(CKRecordZone.ID.self, journal["zoneID"])
        resultsLimit = journal["resultsLimit"]?.int64Value.map(Int.init) ?? CKQueryOperation.maximumResults
        desiredKeys = journal["desiredKeys"]?.arrayValue?.compactMap(\.stringValue)
    }
}

extension CKModifyRecordZonesOperation: LongLivedJournaling {
    static let journalKind = "modifyRecordZones"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["recordZonesToSave"] = try LongLivedJournal.archives(recordZonesToSave ?? [])
        journal["recordZoneIDsToDelete"] = try LongLivedJournal.archives(recordZoneIDsToDelete ?? [])
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        recordZonesToSave = try LongLivedJournal.unarchives(CKRecordZone.self, journal["recordZonesToSave"])
        recordZoneIDsToDelete = try LongLivedJournal.unarchives(CKRecordZone.ID.self, journal["recordZoneIDsToDelete"])
    }
}

extension CKFetchRecordZonesOperation: LongLivedJournaling {
    static let journalKind = "fetchRecordZones"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        // Absent: every zone (`fetchAllRecordZonesOperation`).
        if let recordZoneIDs { journal["recordZoneIDs"] = try LongLivedJournal.archives(recordZoneIDs) }
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        recordZoneIDs = try LongLivedJournal.unarchives(CKRecordZone.ID.self, journal["recordZoneIDs"])
    }
}

extension CKModifySubscriptionsOperation: LongLivedJournaling {
    static let journalKind = "modifySubscriptions"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["subscriptionsToSave"] = .array(
            try (subscriptionsToSave ?? []).map { subscription throws(CKError) in try subscription.wireInput(currentUser: currentUser).json })
        journal["subscriptionIDsToDelete"] = .strings(subscriptionIDsToDelete ?? [])
        return journal
    }

    convenience init(journal: JSONObject, currentUser: String?) throws(CKError) {
        self.init()
        subscriptionsToSave = try (journal["subscriptionsToSave"]?.arrayValue ?? []).map { json throws(CKError) in
            guard case .object(let object) = json, let input = try? SubscriptionInput(json: ObjectReader(object, path: "journaledSubscription")) else {
                throw CKError(.internalError, "a long-lived operation's journal holds a subscription that does not read")
            }
            return CKSubscription.from(input, currentUser: currentUser)
        }
        subscriptionIDsToDelete = journal["subscriptionIDsToDelete"]?.arrayValue?.compactMap(\.stringValue)
    }
}

extension CKFetchSubscriptionsOperation: LongLivedJournaling {
    static let journalKind = "fetchSubscriptions"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        if let subscriptionIDs { journal["subscriptionIDs"] = .strings(subscriptionIDs) }
        return journal
    }

    convenience init(journal: JSONObject) {
        self.init()
        subscriptionIDs = journal["subscriptionIDs"]?.arrayValue?.compactMap(\.stringValue)
    }
}

extension CKFetchNotificationChangesOperation: LongLivedJournaling {
    static let journalKind = "fetchNotificationChanges"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        if let previousServerChangeToken { journal["changeToken"] = try LongLivedJournal.archive(previousServerChangeToken) }
        journal["resultsLimit"] = .int(Int64(resultsLimit))
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        previousServerChangeToken = try LongLivedJournal.unarchive(CKServerChangeToken.self, journal["changeToken"])
        resultsLimit = journal["resultsLimit"]?.int64Value.map(Int.init) ?? 0
    }
}

extension CKMarkNotificationsReadOperation: LongLivedJournaling {
    static let journalKind = "markNotificationsRead"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["notificationIDs"] = .strings((notificationIDs ?? []).map(\.value))
        return journal
    }

    convenience init(journal: JSONObject) {
        self.init()
        notificationIDs = journal["notificationIDs"]?.arrayValue?.compactMap(\.stringValue).map(CKNotification.ID.init)
    }
}

extension CKModifyBadgeOperation: LongLivedJournaling {
    static let journalKind = "modifyBadge"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["badgeValue"] = .int(Int64(badgeValue))
        return journal
    }

    convenience init(journal: JSONObject) {
        self.init()
        badgeValue = journal["badgeValue"]?.int64Value.map(Int.init) ?? 0
    }
}

extension CKFetchShareMetadataOperation: LongLivedJournaling {
    static let journalKind = "fetchShareMetadata"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["shareURLs"] = .strings((shareURLs ?? []).map(\.absoluteString))
        journal["shouldFetchRootRecord"] = .bool(shouldFetchRootRecord)
        if let rootRecordDesiredKeys { journal["rootRecordDesiredKeys"] = .strings(rootRecordDesiredKeys) }
        return journal
    }

    convenience init(journal: JSONObject) {
        self.init()
        shareURLs = journal["shareURLs"]?.arrayValue?.compactMap(\.stringValue).compactMap(URL.init(string:))
        shouldFetchRootRecord = journal["shouldFetchRootRecord"]?.boolValue ?? false
        rootRecordDesiredKeys = journal["rootRecordDesiredKeys"]?.arrayValue?.compactMap(\.stringValue)
    }
}

extension CKAcceptSharesOperation: LongLivedJournaling {
    static let journalKind = "acceptShares"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["shareMetadatas"] = .array((shareMetadatas ?? []).map(\.info.json))
        return journal
    }

    convenience init(journal: JSONObject, currentUser: String?) throws(CKError) {
        self.init()
        shareMetadatas = try (journal["shareMetadatas"]?.arrayValue ?? []).map { json throws(CKError) in
            guard case .object(let object) = json, let info = try? ShareInfo(json: ObjectReader(object, path: "shareMetadata")) else {
                throw CKError(.internalError, "a long-lived operation's journal holds share metadata that does not read")
            }
            return try CKShare.Metadata(info, currentUser: currentUser)
        }
    }
}

extension CKUserIdentity.LookupInfo {
    /// The lookup in a journal: one of an address, a number or a user record ID.
    var journalJSON: JSON {
        if let emailAddress { return ["emailAddress": .string(emailAddress)] }
        if let phoneNumber { return ["phoneNumber": .string(phoneNumber)] }
        if let userRecordID { return ["userRecordID": LongLivedJournal.recordID(userRecordID)] }
        return [:]
    }

    static func fromJournal(_ json: JSON) throws(CKError) -> CKUserIdentity.LookupInfo {
        if let email = json["emailAddress"]?.stringValue { return CKUserIdentity.LookupInfo(emailAddress: email) }
        if let phone = json["phoneNumber"]?.stringValue { return CKUserIdentity.LookupInfo(phoneNumber: phone) }
        if let id = json["userRecordID"] { return CKUserIdentity.LookupInfo(userRecordID: try LongLivedJournal.recordID(id)) }
        throw CKError(.internalError, "a long-lived operation's journal holds a lookup that names nobody")
    }

    static func fromJournal(_ list: JSON?) throws(CKError) -> [CKUserIdentity.LookupInfo] {
        try (list?.arrayValue ?? []).map { json throws(CKError) in try fromJournal(json) }
    }
}

extension CKFetchShareParticipantsOperation: LongLivedJournaling {
    static let journalKind = "fetchShareParticipants"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["lookupInfos"] = .array((lookupInfos ?? []).map(\.journalJSON))
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        lookupInfos = try CKUserIdentity.LookupInfo.fromJournal(journal["lookupInfos"])
    }
}

extension CKDiscoverUserIdentitiesOperation: LongLivedJournaling {
    static let journalKind = "discoverUserIdentities"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["lookupInfos"] = .array(userIdentityLookupInfos.map(\.journalJSON))
        return journal
    }

    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        userIdentityLookupInfos = try CKUserIdentity.LookupInfo.fromJournal(journal["lookupInfos"])
    }
}

extension CKDiscoverAllUserIdentitiesOperation: LongLivedJournaling {
    static let journalKind = "discoverAllUserIdentities"

    func longLivedJournal() throws(CKError) -> JSONObject {
        LongLivedJournal.header(self, kind: Self.journalKind)
    }
}
