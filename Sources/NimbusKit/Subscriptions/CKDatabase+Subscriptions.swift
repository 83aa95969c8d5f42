import Foundation

/// Subscriptions through the convenience API: each call runs `CKModifySubscriptionsOperation`
/// or `CKFetchSubscriptionsOperation` on this database.
extension CKDatabase {
    public func save(_ subscription: CKSubscription, completionHandler: @escaping @Sendable (CKSubscription?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.save(subscription) }, to: completionHandler) }
    }

    /// Creates the subscription, or replaces the one with its ID.
    public func save(_ subscription: CKSubscription) async throws -> CKSubscription {
        let (saves, _) = try await modifySubscriptions(saving: [subscription], deleting: [])
        return try single(saves[subscription.subscriptionID], what: "subscription \(subscription.subscriptionID)")
    }

    public func fetch(
        withSubscriptionID subscriptionID: CKSubscription.ID,
        completionHandler: @escaping @Sendable (CKSubscription?, (any Error)?) -> Void
    ) {
        Task { deliver(await Result { try await self.subscription(for: subscriptionID) }, to: completionHandler) }
    }

    public func subscription(for subscriptionID: CKSubscription.ID) async throws -> CKSubscription {
        try single(try await subscriptions(for: [subscriptionID])[subscriptionID], what: "subscription \(subscriptionID)")
    }

    public func fetch(
        withSubscriptionIDs subscriptionIDs: [CKSubscription.ID],
        completionHandler: @escaping @Sendable (Result<[CKSubscription.ID: Result<CKSubscription, any Error>], any Error>) -> Void
    ) {
        Task { completionHandler(await Result { try await self.subscriptions(for: subscriptionIDs) }) }
    }

    public func subscriptions(for ids: [CKSubscription.ID]) async throws -> [CKSubscription.ID: Result<CKSubscription, any Error>] {
        try await fetchSubscriptions(CKFetchSubscriptionsOperation(subscriptionIDs: ids))
    }

    public func fetchAllSubscriptions(completionHandler: @escaping @Sendable ([CKSubscription]?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.allSubscriptions() }, to: completionHandler) }
    }

    /// The signed-in user's subscriptions in this database, by ID.
    public func allSubscriptions() async throws -> [CKSubscription] {
        try await fetchSubscriptions(.fetchAllSubscriptionsOperation()).values.map { try $0.get() }
            .sorted { $0.subscriptionID < $1.subscriptionID }
    }

    private func fetchSubscriptions(_ operation: CKFetchSubscriptionsOperation) async throws
        -> [CKSubscription.ID: Result<CKSubscription, any Error>]
    {
        let results = Collector<[CKSubscription.ID: Result<CKSubscription, any Error>]>([:])
        operation.perSubscriptionResultBlock = { id, result in results.update { $0[id] = result } }
        try await run(operation) { operation.fetchSubscriptionsResultBlock = $0 }
        return results.value
    }

    public func delete(
        withSubscriptionID subscriptionID: CKSubscription.ID,
        completionHandler: @escaping @Sendable (CKSubscription.ID?, (any Error)?) -> Void
    ) {
        Task { deliver(await Result { try await self.deleteSubscription(withID: subscriptionID) }, to: completionHandler) }
    }

    @discardableResult
    public func deleteSubscription(withID subscriptionID: CKSubscription.ID) async throws -> CKSubscription.ID {
        let (_, deletes) = try await modifySubscriptions(saving: [], deleting: [subscriptionID])
        try single(deletes[subscriptionID], what: "subscription \(subscriptionID)")
        return subscriptionID
    }

    public func modifySubscriptions(
        saving subscriptionsToSave: [CKSubscription], deleting subscriptionIDsToDelete: [CKSubscription.ID],
        completionHandler: @escaping @Sendable (
            Result<
                (
                    saveResults: [CKSubscription.ID: Result<CKSubscription, any Error>],
                    deleteResults: [CKSubscription.ID: Result<Void, any Error>]
                ), any Error
            >
        ) -> Void
    ) {
        Task {
            completionHandler(
                await Result { try await self.modifySubscriptions(saving: subscriptionsToSave, deleting: subscriptionIDsToDelete) })
        }
    }

    public func modifySubscriptions(saving subscriptionsToSave: [CKSubscription], deleting subscriptionIDsToDelete: [CKSubscription.ID])
        async throws -> (
            saveResults: [CKSubscription.ID: Result<CKSubscription, any Error>],
            deleteResults: [CKSubscription.ID: Result<Void, any Error>]
        )
    {
        let operation = CKModifySubscriptionsOperation(
            subscriptionsToSave: subscriptionsToSave, subscriptionIDsToDelete: subscriptionIDsToDelete)
        let saves = Collector<[CKSubscription.ID: Result<CKSubscription, any Error>]>([:])
        let deletes = Collector<[CKSubscription.ID: Result<Void, any Error>]>([:])
        operation.perSubscriptionSaveBlock = { id, result in saves.update { $0[id] = result } }
        operation.perSubscriptionDeleteBlock = { id, result in deletes.update { $0[id] = result } }
        try await run(operation) { operation.modifySubscriptionsResultBlock = $0 }
        return (saves.value, deletes.value)
    }
}
