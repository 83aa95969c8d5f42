import NimbusCore
import NimbusWire

/// Users and discovery, under `/database/1/{container}/{environment}/{database}/`
/// (docs/identities.md).
///
/// | path | service |
/// |---|---|
/// | `users/caller` | `callerIdentity`: the identity at the top level and in `users` (clients read either; reference §10) |
/// | `users/current` | `currentUser` |
/// | `users/discover` | POST with `lookupInfos`: `discoverUsers`; without (GET): `discoverAllUsers` |
/// | `users/lookup/email`, `users/lookup/id` | `lookUpUsers` |
/// | `users/lookup/participants` | `lookUpParticipants` (Nimbus's form of `CKFetchShareParticipantsOperation`) |
/// | `users/lookup/contacts` | `lookUpContacts` (CloudKit JS v1; the discoverable users) |
/// | `users/discoverability` | `discoverability` (Nimbus's wire form of `requestApplicationPermission(.userDiscoverability)`) |
enum UserRoutes {
    static let routes: [Route] = [
        .json("users/caller", .reads) { input in
            let caller = try input.caller
            return CallerIdentityResponse(
                identity: try await input.service.callerIdentity(caller), quota: try await input.service.callerUsage(caller))
        },
        .json("users/current", .reads) { try await $0.service.currentUser($0.caller) },
        .json("users/discover", .reads, cost: .page) { input in
            let body = try await input.body()
            guard body.value(WireKey.lookupInfos) != nil else { return try await input.service.discoverAllUsers(input.caller) }
            return try await input.service.discoverUsers(input.caller, DiscoverUsersRequest(json: body))
        },
        .json("users/lookup/email", .reads) {
            try await $0.service.lookUpUsers($0.caller, LegacyLookupRequest(json: $0.body()), byEmail: true)
        },
        .json("users/lookup/id", .reads) {
            try await $0.service.lookUpUsers($0.caller, LegacyLookupRequest(json: $0.body()), byEmail: false)
        },
        .json("users/lookup/participants", .reads) {
            try await $0.service.lookUpParticipants($0.caller, DiscoverUsersRequest(json: $0.body()))
        },
        .json("users/lookup/contacts", .reads) { try await $0.service.lookUpContacts($0.caller) },
        // A GET asks; only a POST may change whether the user can be found.
        .json("users/discoverability", .reads) { input in
            let request = try DiscoverabilityRequest(json: await input.body())
            if input.request.method == .get, request.discoverable != nil {
                throw CloudKitError.badRequest("setting discoverable takes POST (a GET never changes anything); a GET only asks the status")
            }
            return DiscoverabilityResponse(status: try await input.service.discoverability(input.caller, set: request.discoverable))
        },
    ]
}
