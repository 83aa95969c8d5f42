import NimbusStorage
import NimbusWire

/// What only the development environment allows (docs/dashboard.md): taking a field or a record
/// type out of the schema, and resetting the environment to production's schema with no data.
/// Production's schema only grows, by deploys, since apps in the store read it.
extension NimbusService {
    /// How many development records are read at a time when looking for values of a field.
    static let developmentScanPage = 500

    /// Takes a field (or, with `field` nil, a record type and all its fields) out of the
    /// development schema. Refused while development records hold values of it: the operator
    /// deletes those records, or resets the environment, first. Apple's console strips the
    /// values instead; Nimbus does not rewrite records behind their owners' backs (their
    /// devices would keep values the server no longer has). A declared system field holds no
    /// values of its own, only indexes: it goes at once.
    public func removeFromDevelopmentSchema(container: String, recordType: String, field: String?) async throws {
        if field == nil, recordType == Names.usersRecordType || recordType == Names.shareRecordType {
            throw CloudKitError.badRequest(
                "record type \(recordType) belongs to the server (users and shares are made of it); delete its fields instead")
        }
        let systemField = field.map { Self.systemFieldTypes[$0] != nil } ?? false
        if !systemField {
            // Every partition's records (docs/scale-out.md, "Partitions"); the home's are
            // counted again below, in the transaction that removes the field.
            let holding = try await storage.readEveryPartition(.scan) { tx in
                try Self.recordsHolding(field, container: container, recordType: recordType, tx: tx)
            }.reduce(0, +)
            if holding > 0 { throw Self.stillHeld(holding, recordType: recordType, field: field) }
        }
        try await storage.write { tx in
            try Self.requireContainer(container, tx: tx)
            let schema = try tx.schemaFields(container: container, environment: .development)
            if let field {
                guard schema.contains(where: { $0.recordType == recordType && $0.fieldName == field }) else {
                    throw CloudKitError(
                        .notFound, "\(Names.escaped(recordType)).\(Names.escaped(field)) is not in the development schema")
                }
            } else {
                guard try tx.schemaRecordTypes(container: container, environment: .development).contains(recordType) else {
                    throw CloudKitError(.notFound, "record type '\(Names.escaped(recordType))' is not in the development schema")
                }
            }
            if !systemField {
                let holding = try Self.recordsHolding(field, container: container, recordType: recordType, tx: tx)
                if holding > 0 { throw Self.stillHeld(holding, recordType: recordType, field: field) }
            }
            try tx.removeFromSchema(container: container, environment: .development, recordType: recordType, fieldName: field)
        }
    }

    private static func stillHeld(_ holding: Int, recordType: String, field: String?) -> CloudKitError {
        let what = field.map { "hold values of '\($0)'" } ?? "exist"
        return CloudKitError.badRequest(
            "\(holding) development record(s) of type \(recordType) \(what); delete them (or reset the development environment) first")
    }

    /// How many live development records of a type hold a value of `field` (nil: any record).
    private static func recordsHolding(_ field: String?, container: String, recordType: String, tx: ReadUnit) throws -> Int {
        var count = 0
        var after: Int64 = 0
        while true {
            let page = try tx.liveRecords(
                container: container, environment: .development, recordType: recordType, afterID: after, limit: developmentScanPage)
            for (_, row) in page {
                if let field {
                    if try RecordCodec.decode(row.fields).contains(where: { $0.name == field }) { count += 1 }
                } else {
                    count += 1
                }
            }
            guard let last = page.last else { return count }
            after = last.id
        }
    }

    /// What a reset removed.
    public struct DevelopmentReset: Sendable {
        public var databases = 0
        public var zones = 0
        public var subscriptions = 0
    }

    /// Resets a container's development environment, as CloudKit's console does: every zone
    /// of every development database goes (records, references, assets and indexes with it;
    /// each database gets a fresh default zone, so change tokens from before answer that the
    /// zone was deleted), subscriptions go, and the schema, grants included, becomes
    /// production's. Users keep their accounts and sessions; their user records are made
    /// again. Custom roles made in development stay (roles are never deleted), without grants
    /// production does not give them.
    public func resetDevelopment(container: String) async throws -> DevelopmentReset {
        try await requireContainer(container)
        let members = try await allMembers(container: container)
        var outcome = DevelopmentReset()
        // By database key: database ids are each partition's own.
        let subscriptions = Dictionary(
            grouping: try await storage.readEveryPartition(.scan) { try $0.allSubscriptions() }.joined(), by: \.database)
        let keys =
            [DatabaseKey(container: container, environment: .development, scope: .public, ownerID: 0)]
            + members.flatMap { member in
                // A shared database holds only its user's subscriptions (its zones are owners').
                [DatabaseScope.private, .shared].map {
                    DatabaseKey(container: container, environment: .development, scope: $0, ownerID: member.entry.member.userID)
                }
            }
        for key in keys {
            // A database never made is left unmade (a write would place it on a partition).
            guard try await storage.read(in: key, { try $0.database(key) != nil }) else { continue }
            let (zones, removed) = try await storage.write(in: key) { tx -> (Int, Int) in
                guard let database = try tx.database(key) else { return (0, 0) }
                let zones = key.scope == .shared ? [] : try tx.zones(databaseID: database.id)
                for zone in zones { try tx.deleteZone(id: zone.id) }
                if key.scope != .shared { _ = try tx.createZone(databaseID: database.id, name: Names.defaultZone) }
                var removed = 0
                for subscription in subscriptions[key] ?? [] {
                    if try tx.deleteSubscription(
                        databaseID: database.id, userID: subscription.userID, subscriptionID: subscription.subscriptionID)
                    {
                        removed += 1
                    }
                }
                return (zones.count, removed)
            }
            if zones > 0 { outcome.databases += 1 }
            outcome.zones += zones
            outcome.subscriptions += removed
        }
        try await resetDevelopmentSchema(container: container)
        try await copySecurity(container: container, from: .production, to: .development)
        for member in members {
            try await ensureUserRecord(
                container: container, environment: .development, userID: member.entry.member.userID, userName: member.userName,
                recordName: member.entry.member.userRecordName)
        }
        return outcome
    }

    /// Development's schema made production's: fields and types production lacks go, what
    /// production has comes, with production's types and indexes.
    private func resetDevelopmentSchema(container: String) async throws {
        try await storage.write { tx in
            let productionTypes = try tx.schemaRecordTypes(container: container, environment: .production)
            let productionFields = try tx.schemaFields(container: container, environment: .production)
            let production = Dictionary(uniqueKeysWithValues: productionFields.map { ("\($0.recordType).\($0.fieldName)", $0) })
            for recordType in try tx.schemaRecordTypes(container: container, environment: .development) where !productionTypes.contains(recordType) {
                try tx.removeFromSchema(container: container, environment: .development, recordType: recordType, fieldName: nil)
            }
            var development: [String: SchemaFieldRow] = [:]
            for field in try tx.schemaFields(container: container, environment: .development) {
                let key = "\(field.recordType).\(field.fieldName)"
                if production[key]?.fieldType == field.fieldType {
                    development[key] = field
                } else {
                    try tx.removeFromSchema(container: container, environment: .development, recordType: field.recordType, fieldName: field.fieldName)
                }
            }
            for recordType in productionTypes { try tx.addSchemaRecordType(container: container, environment: .development, recordType) }
            for (key, field) in production {
                if let existing = development[key] {
                    if existing.indexes != field.indexes {
                        _ = try tx.setSchemaFieldIndexes(
                            container: container, environment: .development, recordType: field.recordType, fieldName: field.fieldName,
                            indexes: field.indexes)
                    }
                } else {
                    try tx.addSchemaField(container: container, environment: .development, field)
                }
            }
        }
    }
}
