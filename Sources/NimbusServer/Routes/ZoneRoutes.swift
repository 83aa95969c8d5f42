import NimbusWire

/// Zones, under `/database/1/{container}/{environment}/{database}/`.
///
/// | path | service |
/// |---|---|
/// | `zones/list` | `listZones` |
/// | `zones/lookup` | `lookupZones` |
/// | `zones/modify` | `modifyZones` |
/// | `zones/changes` | `databaseChanges` (deprecated: also in public, with `metaSyncToken`) |
enum ZoneRoutes {
    static let routes: [Route] = [
        .json("zones/list", .reads) { try await $0.service.listZones($0.target) },
        .json("zones/lookup", .reads) { try await $0.service.lookupZones($0.target, ZonesLookupRequest(json: $0.body())) },
        .json("zones/modify") { try await $0.service.modifyZones($0.target, ZonesModifyRequest(json: $0.body())) },
        .rawJSON("zones/changes", .reads, cost: .page) { input in
            let changes = try await input.service.databaseChanges(
                input.target, DatabaseChangesRequest(json: input.body()), allowPublic: true)
            guard case .object(var object) = changes.json else { return changes.json }
            object[WireKey.metaSyncToken] = .string(changes.syncToken)
            return .object(object)
        },
    ]
}
