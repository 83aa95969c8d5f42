import NimbusWire

/// Change feeds, under `/database/1/{container}/{environment}/{database}/`.
///
/// | path | service |
/// |---|---|
/// | `changes/database` | `databaseChanges` (zones changed since a token) |
/// | `changes/zone` | `zoneChanges` (records changed in zones since their tokens) |
enum ChangeRoutes {
    static let routes: [Route] = [
        .json("changes/database", .reads, cost: .page) { try await $0.service.databaseChanges($0.target, DatabaseChangesRequest(json: $0.body())) },
        .json("changes/zone", .reads, cost: .page) { try await $0.service.zoneChanges($0.target, ZoneChangesRequest(json: $0.body())) },
    ]
}
