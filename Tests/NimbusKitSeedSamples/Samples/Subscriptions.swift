// The seeds' subscription code in today's Swift: the 2014 "Party Time!" query subscription and
// its push handler, the 2016 silent database subscription saved with an operation, and the
// notification collection the 2014 advanced session lists.
import NimbusKit

enum Subscriptions2014 {
    /// New parties in the future, announced with a localized alert, a sound and a badge.
    static func partySubscription() -> CKQuerySubscription {
        let predicate = NSPredicate(format: "start > %@", Date() as NSDate)
        let subscription = CKQuerySubscription(recordType: "Party", predicate: predicate, options: .firesOnRecordCreation)
        let notificationInfo = CKSubscription.NotificationInfo()
        notificationInfo.alertLocalizationKey = "LOCAL_NOTIFICATION_KEY"
        notificationInfo.soundName = "Party.aiff"
        notificationInfo.shouldBadge = true
        subscription.notificationInfo = notificationInfo
        return subscription
    }

    static func save(_ subscription: CKSubscription, in publicDatabase: CKDatabase, done: @escaping @Sendable ((any Error)?) -> Void) {
        publicDatabase.save(subscription) { _, error in
            // labor-of-love error handling when error != nil
            done(error)
        }
    }

    /// `application(_:didReceiveRemoteNotification:)`: the record a query push is about.
    static func handlePush(_ userInfo: [AnyHashable: Any]) -> (alert: String?, recordID: CKRecord.ID?) {
        guard let cloudKitNotification = CKNotification(fromRemoteNotificationDictionary: userInfo) else { return (nil, nil) }
        let alertBody = cloudKitNotification.alertLocalizationKey ?? cloudKitNotification.alertBody
        if cloudKitNotification.notificationType == .query, let queryNotification = cloudKitNotification as? CKQueryNotification {
            return (alertBody, queryNotification.recordID)
        }
        return (alertBody, nil)
    }
}

enum Subscriptions2016 {
    /// Subscribe once per install: a silent push for any change in the shared database.
    static func subscribeToSharedChanges(_ container: CKContainer, cachedSubscribed: Bool, done: @escaping @Sendable ((any Error)?) -> Void) {
        guard !cachedSubscribed else { return done(nil) }
        let subscription = CKDatabaseSubscription(subscriptionID: "shared-changes")
        let notificationInfo = CKSubscription.NotificationInfo()
        notificationInfo.shouldSendContentAvailable = true
        subscription.notificationInfo = notificationInfo

        let operation = CKModifySubscriptionsOperation(subscriptionsToSave: [subscription], subscriptionIDsToDelete: [])
        operation.modifySubscriptionsCompletionBlock = { _, _, error in
            // No error: the subscription is saved; cache that, so the next launch skips this.
            done(error)
        }
        operation.qualityOfService = .utility
        container.sharedCloudDatabase.add(operation)
    }

    /// The push handler: which subscription fired decides what to fetch.
    static func subscriptionID(of userInfo: [AnyHashable: Any]) -> CKSubscription.ID? {
        let notification = CKNotification(fromRemoteNotificationDictionary: userInfo)
        return notification?.subscriptionID
    }
}

enum NotificationCollection2014 {
    /// Reads what pushes missed, marks it read, and clears the badge.
    static func catchUp(_ container: CKContainer, since token: CKServerChangeToken?) async -> (ids: [CKNotification.ID], error: (any Error)?) {
        let fetched = LockedList<CKNotification.ID>()
        let fetch = CKFetchNotificationChangesOperation(previousServerChangeToken: token)
        fetch.notificationChangedBlock = { notification in
            if let id = notification.notificationID { fetched.append(id) }
        }
        let mark = CKMarkNotificationsReadOperation(notificationIDsToMarkRead: [])
        let badge = CKModifyBadgeOperation(badgeValue: 0)
        let failure = LockedList<any Error>()
        fetch.fetchNotificationChangesCompletionBlock = { _, error in
            if let error { failure.append(error) }
            mark.notificationIDs = fetched.items
        }
        mark.markNotificationsReadCompletionBlock = { _, error in if let error { failure.append(error) } }
        mark.addDependency(fetch)
        badge.addDependency(mark)
        return await withCheckedContinuation { continuation in
            badge.modifyBadgeCompletionBlock = { error in
                if let error { failure.append(error) }
                continuation.resume(returning: (fetched.items, failure.items.first))
            }
            container.add(fetch)
            container.add(mark)
            container.add(badge)
        }
    }

    final class LockedList<Item>: @unchecked Sendable {
        private let lock = NSLock()
        private var _items: [Item] = []
        var items: [Item] { lock.withLock { _items } }
        func append(_ item: Item) { lock.withLock { _items.append(item) } }
    }
}
