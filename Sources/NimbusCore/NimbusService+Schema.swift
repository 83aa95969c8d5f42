import NimbusStorage
import NimbusWire

/// The schema of a container environment: what `nimbus schema` shows and deploys.
extension NimbusService {
    public struct SchemaDescription: Sendable {
        public var recordTypes: [String]
        public var fields: [SchemaFieldRow]
    }

    public func schema(container: String, environment: Environment) async throws -> SchemaDescription {
        try await storage.read { tx in
            SchemaDescription(
                recordTypes: try tx.schemaRecordTypes(container: container, environment: environment),
                fields: try tx.schemaFields(container: container, environment: environment))
        }
    }

    /// Copies the development schema into production, its security roles and grants included
    /// (docs/roles.md). Additive only: a field whose type differs between the two refuses the
    /// whole deploy, which changes nothing. Returns how many record types, fields and roles
    /// were new in production.
    public func deploySchema(container: String) async throws -> (recordTypes: Int, fields: Int, roles: Int) {
        let (recordTypes, fields) = try await deployRecordTypes(container: container)
        return (recordTypes, fields, try await deploySecurity(container: container))
    }

    private func deployRecordTypes(container: String) async throws -> (recordTypes: Int, fields: Int) {
        try await storage.write { tx in
            guard try tx.container(id: container) != nil else {
                throw CloudKitError(.notFound, "container '\(Names.escaped(container))' does not exist")
            }
            let developmentTypes = try tx.schemaRecordTypes(container: container, environment: .development)
            let developmentFields = try tx.schemaFields(container: container, environment: .development)
            let productionTypes = Set(try tx.schemaRecordTypes(container: container, environment: .production))
            var productionFields: [String: String] = [:]
            for field in try tx.schemaFields(container: container, environment: .production) {
                productionFields["\(field.recordType).\(field.fieldName)"] = field.fieldType
            }
            let conflicts = developmentFields.compactMap { field -> String? in
                guard let existing = productionFields["\(field.recordType).\(field.fieldName)"], existing != field.fieldType
                else { return nil }
                return "\(field.recordType).\(field.fieldName) is \(existing) in production but \(field.fieldType) in development"
            }
            guard conflicts.isEmpty else {
                throw CloudKitError.badRequest("cannot deploy: \(conflicts.joined(separator: "; "))")
            }
            var newTypes = 0
            var newFields = 0
            for recordType in developmentTypes where !productionTypes.contains(recordType) {
                try tx.addSchemaRecordType(container: container, environment: .production, recordType)
                newTypes += 1
            }
            // Production records hold no values of fields new to production, but every record has
            // the system fields: declaring one there means filling in its index.
            var typesToReindex = Set<String>()
            for field in developmentFields where productionFields["\(field.recordType).\(field.fieldName)"] == nil {
                try tx.addSchemaField(container: container, environment: .production, field)
                if Self.systemFieldTypes[field.fieldName] != nil { typesToReindex.insert(field.recordType) }
                newFields += 1
            }
            for recordType in typesToReindex.sorted() {
                try self.rebuildIndexEntries(container: container, environment: .production, recordType: recordType, tx: tx)
            }
            return (newTypes, newFields)
        }
    }

    /// Sets which indexes a field has (`SchemaFieldRow.Indexes` flags): the seeds' "drop the
    /// index you never query". Returns false when the field is not in that schema.
    public func setFieldIndexes(
        container: String, environment: Environment, recordType: String, field: String, indexes: Int
    ) async throws -> Bool {
        guard (0...SchemaFieldRow.Indexes.all).contains(indexes) else {
            throw CloudKitError.badRequest("index flags must be a combination of QUERYABLE, SORTABLE and SEARCHABLE")
        }
        let systemType = Self.systemFieldTypes[field]
        return try await storage.write { tx in
            if indexes != 0,
                let row = try tx.schemaFields(container: container, environment: environment).first(where: {
                    $0.recordType == recordType && $0.fieldName == field
                }), FieldType(wireName: row.fieldType)?.isEncrypted == true
            {
                throw CloudKitError.badRequest(
                    "field '\(field)' of record type '\(recordType)' is encrypted (\(row.fieldType)): the server cannot read it, so it can have no index")
            }
            if try !tx.setSchemaFieldIndexes(
                container: container, environment: environment, recordType: recordType, fieldName: field, indexes: indexes)
            {
                // System fields exist on every type; declaring one is how it gets an index.
                guard let systemType,
                    try tx.schemaRecordTypes(container: container, environment: environment).contains(recordType)
                else { return false }
                try tx.addSchemaField(
                    container: container, environment: environment,
                    SchemaFieldRow(recordType: recordType, fieldName: field, fieldType: systemType.wireName, indexes: indexes))
            }
            if environment == .production {
                try self.rebuildIndexEntries(container: container, environment: environment, recordType: recordType, tx: tx)
            }
            return true
        }
    }

    /// After a storage upgrade that changed what index entries hold (v6 added sorted pairs, v8
    /// exact integers), rewrites the entries of every record in both environments. Once, in
    /// one transaction, before the service answers.
    func rebuildIndexesIfRequested() async throws {
        try await storage.write { tx in
            guard try tx.takeIndexRebuildRequest() else { return }
            for container in try tx.containers() {
                for environment in [Environment.development, .production] {
                    for recordType in try tx.schemaRecordTypes(container: container.id, environment: environment) {
                        try self.rebuildIndexEntries(container: container.id, environment: environment, recordType: recordType, tx: tx)
                    }
                }
            }
        }
    }

    /// Rewrites the index entries of every live record of a type, after the indexes its
    /// schema grants changed. Production records carry only granted entries
    /// (`RecordIndexer.Policy`), so a newly granted index must be filled in before a query may
    /// use it; development records carry everything already. In the caller's transaction, so
    /// the index is complete when the change is visible.
    func rebuildIndexEntries(container: String, environment: Environment, recordType: String, tx: any StorageWriter) throws {
        var grants: [String: Int] = [:]
        for field in try tx.schemaFields(container: container, environment: environment) where field.recordType == recordType {
            grants[field.fieldName] = field.indexes
        }
        let policy = RecordIndexer.Policy.of(environment, grants: grants)
        var after: Int64 = 0
        while true {
            let page = try tx.liveRecords(container: container, environment: environment, recordType: recordType, afterID: after, limit: 500)
            for (id, row) in page {
                let index = RecordIndexer.entries(for: row, fields: try RecordCodec.decode(row.fields), policy: policy)
                try tx.replaceIndexEntries(recordID: id, zoneID: row.zoneID, recordType: recordType, index, hadEntries: true)
            }
            guard let last = page.last else { return }
            after = last.id
        }
    }
}
