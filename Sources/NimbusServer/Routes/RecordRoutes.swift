import NimbusWire

/// Records, under `/database/1/{container}/{environment}/{database}/`.
///
/// | path | service |
/// |---|---|
/// | `records/modify` | `modifyRecords` |
/// | `records/lookup` | `lookupRecords` |
/// | `records/query` | `queryRecords` |
/// | `records/changes` | `recordChanges` (deprecated: one zone's changes) |
/// | `records/resolve`, `records/accept` | `resolveShares` (public database only; docs/sharing.md) |
enum RecordRoutes {
    static let routes: [Route] = [
        .json("records/modify") { input in
            // Only a user or a server-to-server key writes: said before the body (the largest
            // any route reads whole) is read, so an API token alone cannot make the server read it.
            try input.caller.requireWriter(for: "Saving records")
            return try await input.service.modifyRecords(input.target, RecordsModifyRequest(json: input.body()))
        },
        .json("records/lookup", .reads) { try await $0.service.lookupRecords($0.target, RecordsLookupRequest(json: $0.body())) },
        .json("records/query", .reads, cost: .page) { try await $0.service.queryRecords($0.target, RecordsQueryRequest(json: $0.body())) },
        .json("records/changes", .reads, cost: .page) { try await $0.service.recordChanges($0.target, ZoneChangesRequest(singleZone: $0.body())) },
        .json("records/resolve", .reads) { try await $0.service.resolveShares($0.target, ShortGUIDsRequest(json: $0.body()), accepting: false) },
        .json("records/accept") { try await $0.service.resolveShares($0.target, ShortGUIDsRequest(json: $0.body()), accepting: true) },
    ]
}
