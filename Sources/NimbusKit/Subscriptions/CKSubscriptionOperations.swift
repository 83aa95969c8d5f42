import Foundation
import NimbusWire

/// Saves and deletes subscriptions (`subscriptions/modify`). Saving is an upsert, as in
/// CloudKit: a subscription is sent as a create, and one whose ID already exists is sent
/// again as an update.
open class CKModifySubscriptionsOperation: CKDatabaseOperation, @unchecked Sendable {
    public var subscriptionsToSave: [CKSubscription]?
    public var subscriptionIDsToDelete: [CKSubscription.ID]?

    public var perSubscriptionSaveBlock: (@Sendable (CKSubscription.ID, Result<CKSubscription, any Error>) -> Void)?
    public var perSubscriptionDeleteBlock: (@Sendable (CKSubscription.ID, Result<Void, any Error>) -> Void)?
    public var modifySubscriptionsResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older final callback.
    public var modifySubscriptionsCompletionBlock: (@Sendable ([CKSubscription]?, [CKSubscription.ID]?, (any Error)?) -> Void)?

    private var saved: [CKSubscription] = []
    private var deleted: [CKSubscription.ID] = []
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(subscriptionsToSave: [CKSubscription]? = nil, subscriptionIDsToDelete: [CKSubscription.ID]? = nil) {
        self.init()
        self.subscriptionsToSave = subscriptionsToSave
        self.subscriptionIDsToDelete = subscriptionIDsToDelete
    }

    private enum Item {
        case save(CKSubscription, SubscriptionInput)
        case delete(CKSubscription.ID)

        var id: CKSubscription.ID {
            switch self {
            case .save(let subscription, _): return subscription.subscriptionID
            case .delete(let id): return id
            }
        }
    }

    override func run() async throws {
        var items: [Item] = []
        for subscription in subscriptionsToSave ?? [] {
            do {
                items.append(.save(subscription, try subscription.wireInput(currentUser: currentUser)))
            } catch {
                fail(.save(subscription, SubscriptionInput(subscriptionID: subscription.subscriptionID, type: subscription.subscriptionType.wire)), error)
            }
        }
        items += (subscriptionIDsToDelete ?? []).map(Item.delete)
        for chunk in chunked(items, size: Self.itemsPerRequest) {
            try Task.checkCancellation()
            var existing: [Item] = []
            for (item, entry) in zip(chunk, try await send(Array(chunk), saveAs: .create)) {
                if case .save = item, case .failure(let failure) = entry, failure.code == .exists {
                    existing.append(item)
                } else {
                    report(item, entry)
                }
            }
            guard !existing.isEmpty else { continue }
            for (item, entry) in zip(existing, try await send(existing, saveAs: .update)) { report(item, entry) }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "subscriptions to save or delete") }
    }

    private func send(_ items: [Item], saveAs operationType: SubscriptionOperationType) async throws
        -> [ItemResult<SubscriptionEntry>]
    {
        let body = SubscriptionsModifyRequest(
            operations: items.map { item in
                switch item {
                case .save(_, let input): SubscriptionsModifyRequest.Operation(type: operationType, subscription: input)
                case .delete(let id): SubscriptionsModifyRequest.Operation(deleting: id)
                }
            })
        return try await post("subscriptions/modify", body.json, as: SubscriptionsResponse.self).subscriptions
    }

    private func report(_ item: Item, _ entry: ItemResult<SubscriptionEntry>) {
        let answer: SubscriptionEntry
        switch entry {
        case .failure(let failure):
            // Resumed after a relaunch, a delete that finds nothing is the earlier launch's.
            if case .delete(let id) = item, isResumedFromJournal, failure.code == .notFound {
                deleted.append(id)
                perSubscriptionDeleteBlock?(id, .success(()))
                return
            }
            return fail(item, CKError.fromServer(failure))
        case .success(let entry): answer = entry
        }
        switch item {
        case .save(let subscription, _):
            guard case .subscription(let definition) = answer else {
                return fail(item, CKError(.serverResponseLost, "the server's answer to saving subscription '\(subscription.subscriptionID)' is not a subscription"))
            }
            let stored = CKSubscription.from(definition, currentUser: currentUser)
            saved.append(stored)
            perSubscriptionSaveBlock?(subscription.subscriptionID, .success(stored))
        case .delete(let id):
            deleted.append(id)
            perSubscriptionDeleteBlock?(id, .success(()))
        }
    }

    private func fail(_ item: Item, _ error: any Error) {
        failures[item.id] = error
        switch item {
        case .save(let subscription, _): perSubscriptionSaveBlock?(subscription.subscriptionID, .failure(error))
        case .delete(let id): perSubscriptionDeleteBlock?(id, .failure(error))
        }
    }

    override func finish(with error: CKError?) {
        modifySubscriptionsResultBlock?(error.map { .failure($0) } ?? .success(()))
        modifySubscriptionsCompletionBlock?(saved, deleted, error)
    }
}

/// Fetches subscriptions by ID (`subscriptions/lookup`), or all of the user's in the
/// database (`subscriptions/list`).
open class CKFetchSubscriptionsOperation: CKDatabaseOperation, @unchecked Sendable {
    /// The subscriptions to fetch; nil fetches them all.
    public var subscriptionIDs: [CKSubscription.ID]?

    public var perSubscriptionResultBlock: (@Sendable (CKSubscription.ID, Result<CKSubscription, any Error>) -> Void)?
    public var fetchSubscriptionsResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older final callback.
    public var fetchSubscriptionCompletionBlock: (@Sendable ([CKSubscription.ID: CKSubscription]?, (any Error)?) -> Void)?

    private var fetched: [CKSubscription.ID: CKSubscription] = [:]
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(subscriptionIDs: [CKSubscription.ID]) {
        self.init()
        self.subscriptionIDs = subscriptionIDs
    }

    public static func fetchAllSubscriptionsOperation() -> CKFetchSubscriptionsOperation {
        CKFetchSubscriptionsOperation()
    }

    override func run() async throws {
        guard let subscriptionIDs else {
            for case .success(.subscription(let definition)) in try await post(
                "subscriptions/list", [:], as: SubscriptionsResponse.self
            ).subscriptions {
                let subscription = CKSubscription.from(definition, currentUser: currentUser)
                fetched[subscription.subscriptionID] = subscription
                perSubscriptionResultBlock?(subscription.subscriptionID, .success(subscription))
            }
            return
        }
        for chunk in chunked(subscriptionIDs, size: Self.itemsPerRequest) {
            try Task.checkCancellation()
            let body = SubscriptionsLookupRequest(subscriptionIDs: Array(chunk))
            let entries = try await post("subscriptions/lookup", body.json, as: SubscriptionsResponse.self).subscriptions
            for (id, entry) in zip(chunk, entries) {
                if case .success(.subscription(let definition)) = entry {
                    let subscription = CKSubscription.from(definition, currentUser: currentUser)
                    fetched[id] = subscription
                    perSubscriptionResultBlock?(id, .success(subscription))
                } else {
                    let error =
                        if case .failure(let failure) = entry {
                            CKError.fromServer(failure)
                        } else {
                            CKError(.serverResponseLost, "subscription \(id): the server's answer is not a subscription")
                        }
                    failures[id] = error
                    perSubscriptionResultBlock?(id, .failure(error))
                }
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "subscriptions to fetch") }
    }

    override func finish(with error: CKError?) {
        fetchSubscriptionsResultBlock?(error.map { .failure($0) } ?? .success(()))
        fetchSubscriptionCompletionBlock?(fetched, error)
    }
}
