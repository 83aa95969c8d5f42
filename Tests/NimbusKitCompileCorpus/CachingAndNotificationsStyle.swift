// What apps that keep a local cache write around CloudKit: system fields archived with
// NSKeyedArchiver, change tokens kept on disk, remote notifications read back as
// CKNotifications, operation groups, user discovery, and an error switch over every code.
import Foundation
import NimbusKit

enum LocalCache {
    /// The system fields of a record, kept beside the app's own copy of its values.
    static func systemFields(of record: CKRecord) -> Data {
        let archiver = NSKeyedArchiver(requiringSecureCoding: true)
        record.encodeSystemFields(with: archiver)
        archiver.finishEncoding()
        return archiver.encodedData
    }

    static func record(fromSystemFields data: Data) -> CKRecord? {
        guard let unarchiver = try? NSKeyedUnarchiver(forReadingFrom: data) else { return nil }
        unarchiver.requiresSecureCoding = true
        defer { unarchiver.finishDecoding() }
        return CKRecord(coder: unarchiver)
    }

    static func save(_ token: CKServerChangeToken) throws -> Data {
        try NSKeyedArchiver.archivedData(withRootObject: token, requiringSecureCoding: true)
    }

    static func token(from data: Data) throws -> CKServerChangeToken? {
        try NSKeyedUnarchiver.unarchivedObject(ofClass: CKServerChangeToken.self, from: data)
    }
}

enum RemoteNotifications {
    /// `application(_:didReceiveRemoteNotification:fetchCompletionHandler:)`'s body.
    static func handle(_ userInfo: [AnyHashable: Any], refresh: (CKRecordZone.ID?) -> Void) {
        guard let notification = CKNotification(fromRemoteNotificationDictionary: userInfo) else { return }
        print(notification.notificationID as Any, notification.subscriptionID as Any, notification.containerIdentifier as Any)
        switch notification.notificationType {
        case .query:
            if let query = notification as? CKQueryNotification {
                print(query.recordID as Any, query.queryNotificationReason == .recordCreated, query.recordFields as Any, query.databaseScope)
            }
        case .recordZone:
            refresh((notification as? CKRecordZoneNotification)?.recordZoneID)
        case .database:
            if let database = notification as? CKDatabaseNotification { print(database.databaseScope == .private) }
            refresh(nil)
        case .readNotification: break
        @unknown default: break
        }
    }

    static func markRead(_ ids: [CKNotification.ID], in container: CKContainer) {
        let operation = CKMarkNotificationsReadOperation(notificationIDsToMarkRead: ids)
        operation.markNotificationsReadCompletionBlock = { ids, error in print(ids?.count ?? 0, error as Any) }
        container.add(operation)
        let badge = CKModifyBadgeOperation(badgeValue: 0)
        badge.modifyBadgeCompletionBlock = { error in print(error as Any) }
        container.add(badge)
    }
}

enum Grouped {
    static func run(in database: CKDatabase) {
        let group = CKOperationGroup()
        group.name = "Initial sync"
        group.expectedSendSize = .kilobytes
        group.expectedReceiveSize = .megabytes
        group.quantity = 2
        let fetch = CKFetchSubscriptionsOperation.fetchAllSubscriptionsOperation()
        fetch.perSubscriptionResultBlock = { id, result in print(id, result) }
        fetch.group = group
        database.add(fetch)
        let query = CKQuery(recordType: "Store", predicate: NSPredicate(format: "distanceToLocation:fromLocation:(location, %@) < 1000", CLLocation(latitude: 48.85, longitude: 2.35)))
        query.sortDescriptors = [CKLocationSortDescriptor(key: "location", relativeLocation: CLLocation(latitude: 48.85, longitude: 2.35))]
        let operation = CKQueryOperation(query: query)
        operation.group = group
        database.add(operation)
    }
}

enum People {
    static func discover(in container: CKContainer) async throws {
        if let identity = try await container.userIdentity(forEmailAddress: "ann@example.com") {
            print(identity.userRecordID as Any, identity.nameComponents as Any, identity.lookupInfo as Any, identity.hasiCloudAccount)
        }
        container.discoverUserIdentity(withEmailAddress: "bob@example.com") { identity, error in print(identity as Any, error as Any) }
        let operation = CKDiscoverUserIdentitiesOperation(userIdentityLookupInfos: CKUserIdentity.LookupInfo.lookupInfos(withEmails: ["c@example.com"]))
        operation.userIdentityDiscoveredBlock = { identity, lookupInfo in print(identity, lookupInfo) }
        operation.discoverUserIdentitiesResultBlock = { result in print(result) }
        container.add(operation)
        let status = try await container.requestApplicationPermission(.userDiscoverability)
        print(status == .granted)
    }
}

/// Apps switch over the codes to decide what to do; every case must exist.
func advice(for error: Error) -> String {
    guard let error = error as? CKError else { return "not CloudKit" }
    switch error.code {
    case .internalError, .serverRejectedRequest, .resultsTruncated, .constraintViolation, .badContainer, .badDatabase,
        .missingEntitlement, .invalidArguments, .incompatibleVersion, .permissionFailure, .assetFileModified,
        .assetFileNotFound, .operationCancelled, .alreadyShared, .referenceViolation, .managedAccountRestricted,
        .participantMayNeedVerification, .tooManyParticipants, .serverResponseLost, .assetNotAvailable,
        .accountTemporarilyUnavailable, .batchRequestFailed, .limitExceeded, .serverRecordChanged, .partialFailure:
        return "\(error.code.rawValue): \(error.localizedDescription)"
    case .networkUnavailable, .networkFailure, .serviceUnavailable, .requestRateLimited, .zoneBusy:
        return "retry after \(error.retryAfterSeconds ?? 0)"
    case .notAuthenticated, .unknownItem, .zoneNotFound, .userDeletedZone, .changeTokenExpired, .quotaExceeded:
        return "act"
    @unknown default:
        return "new"
    }
}
