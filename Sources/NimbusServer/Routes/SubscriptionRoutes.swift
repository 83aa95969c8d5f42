import NimbusWire

/// Subscriptions, under `/database/1/{container}/{environment}/{database}/`.
///
/// | path | service |
/// |---|---|
/// | `subscriptions/list` | `listSubscriptions` |
/// | `subscriptions/lookup` | `lookupSubscriptions` |
/// | `subscriptions/modify` | `modifySubscriptions` |
enum SubscriptionRoutes {
    static let routes: [Route] = [
        .json("subscriptions/list", .reads) { try await $0.service.listSubscriptions($0.target) },
        .json("subscriptions/lookup", .reads) {
            try await $0.service.lookupSubscriptions($0.target, SubscriptionsLookupRequest(json: $0.body()))
        },
        .json("subscriptions/modify") {
            try await $0.service.modifySubscriptions($0.target, SubscriptionsModifyRequest(json: $0.body()))
        },
    ]
}
