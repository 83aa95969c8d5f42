/// The response body of `subscriptions/list`, `subscriptions/lookup` and `subscriptions/modify`
/// (reference §9).

/// A subscription (its definition, as `SubscriptionInput` reads and writes it) or a deleted one.
public enum SubscriptionEntry: WireBody {
    case subscription(SubscriptionInput)
    case deleted(subscriptionID: String)

    public init(json: ObjectReader) throws(CloudKitError) {
        if try json.bool(WireKey.deleted) == true {
            self = .deleted(subscriptionID: try json.requiredString(WireKey.subscriptionID))
        } else {
            self = .subscription(try SubscriptionInput(json: json))
        }
    }

    public var json: JSON {
        switch self {
        case .subscription(let subscription): subscription.json
        case .deleted(let id): [WireKey.subscriptionID: .string(id), WireKey.deleted: true]
        }
    }
}

public struct SubscriptionsResponse: WireBody {
    public var subscriptions: [ItemResult<SubscriptionEntry>]

    public init(subscriptions: [ItemResult<SubscriptionEntry>]) { self.subscriptions = subscriptions }

    public init(json: ObjectReader) throws(CloudKitError) { subscriptions = try json.list(WireKey.subscriptions) }

    public var json: JSON { [WireKey.subscriptions: subscriptions.json] }
}
