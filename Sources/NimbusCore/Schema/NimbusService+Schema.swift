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

    /// Writes production refused for what its schema still lacks, of one container or (nil)
    /// every one, most recent first: what a deploy would mend (one since makes them go).
    public func productionSchemaRefusals(container: String?) async throws -> [SchemaRefusalRow] {
        let refusals = try await accounts.schemaRefusals(container: container, environment: .production)
        var lacking: [String: Set<String>] = [:]  // what each container's production has, read once
        var found: [SchemaRefusalRow] = []
        for refusal in refusals {
            if lacking[refusal.container] == nil {
                let schema = try await schema(container: refusal.container, environment: .production)
                lacking[refusal.container] = Set(schema.recordTypes).union(schema.fields.map { "\($0.recordType).\($0.fieldName)" })
            }
            if lacking[refusal.container]?.contains(refusal.missing) == false { found.append(refusal) }
        }
        return found
    }

    /// Copies the development schema into production, its security roles and grants included
    /// (docs/roles.md). Additive only: a field whose type differs between the two refuses the
    /// whole deploy, which changes nothing. Returns how many record types, fields and roles
    /// were new in production.
    public func deploySchema(container: String) async throws -> (recordTypes: Int, fields: Int, roles: Int) {
        let (recordTypes, fields) = try await deployRecordTypes(container: container)
        return (recordTypes, fields, try await copySecurity(container: container, from: .development, to: .production))
    }

    /// On every partition, each from its own copy of the schema (the same as the home's) and
    /// indexing its own production records; the home's counts are the answer.
    private func deployRecordTypes(container: String) async throws -> (recordTypes: Int, fields: Int) {
        try await requireContainer(container)
        let counts = try await storage.writeEveryPartition { tx in
            let plan = try Self.recordTypePlan(container: container, tx: tx)
            guard plan.conflicts.isEmpty else {
                throw CloudKitError.badRequest("cannot deploy: \(plan.conflicts.joined(separator: "; "))")
            }
            for recordType in plan.newRecordTypes {
                try tx.addSchemaRecordType(container: container, environment: .production, recordType)
            }
            // Production records hold no values of fields new to production, but every record has
            // the system fields: declaring one there means filling in its index.
            var typesToReindex = Set<String>()
            for field in plan.newFields {
                try tx.addSchemaField(container: container, environment: .production, field)
                if Self.systemFieldTypes[field.fieldName] != nil { typesToReindex.insert(field.recordType) }
            }
            // An index development added to a field production has: its records' entries are
            // written now, so the first production query that needs it finds every record.
            for field in plan.newIndexes {
                _ = try tx.setSchemaFieldIndexes(
                    container: container, environment: .production, recordType: field.recordType, fieldName: field.fieldName,
                    indexes: field.indexes)
                typesToReindex.insert(field.recordType)
            }
            for recordType in typesToReindex.sorted() {
                try self.rebuildIndexEntries(container: container, environment: .production, recordType: recordType, tx: tx)
            }
            return (plan.newRecordTypes.count, plan.newFields.count)
        }
        return counts[0]
    }

    /// What deploying development to production would do, written nowhere: the dashboard's
    /// diff. A deploy only adds; `conflicts` (a field whose type differs) refuse it whole, since
    /// changing a type in production would lose the values records hold.
    public struct SchemaDeployPlan: Sendable {
        public var newRecordTypes: [String] = []
        public var newFields: [SchemaFieldRow] = []
        /// Fields both have where development has an index production lacks, with the indexes
        /// production will have (its own and development's: a deploy adds indexes, and one an
        /// operator dropped from production stays dropped until development adds it again).
        public var newIndexes: [SchemaFieldRow] = []
        /// Fields production has and development does not: kept, never deleted by a deploy.
        public var keptFields: [SchemaFieldRow] = []
        public var conflicts: [String] = []
        public var newRoles: [String] = []
        /// `recordType`, `role`, `permissions` as development grants them, where production differs.
        public var changedGrants: [SecurityGrant] = []
    }

    public func schemaDeployPlan(container: String) async throws -> SchemaDeployPlan {
        try await requireContainer(container)
        var plan = try await storage.read { tx in try Self.recordTypePlan(container: container, tx: tx) }
        (plan.newRoles, plan.changedGrants) = try await securityDifference(container: container, from: .development, to: .production)
        return plan
    }

    /// Of a container that exists (its row is the home's alone, and the plan is made on every
    /// partition).
    private static func recordTypePlan(container: String, tx: ReadUnit) throws -> SchemaDeployPlan {
        let developmentFields = try tx.schemaFields(container: container, environment: .development)
        let productionTypes = Set(try tx.schemaRecordTypes(container: container, environment: .production))
        let productionFields = try tx.schemaFields(container: container, environment: .production)
        var productionRow: [String: SchemaFieldRow] = [:]
        for field in productionFields { productionRow["\(field.recordType).\(field.fieldName)"] = field }
        let developmentNames = Set(developmentFields.map { "\($0.recordType).\($0.fieldName)" })
        var plan = SchemaDeployPlan()
        plan.newRecordTypes = try tx.schemaRecordTypes(container: container, environment: .development).filter { !productionTypes.contains($0) }
        for field in developmentFields {
            switch productionRow["\(field.recordType).\(field.fieldName)"] {
            case nil: plan.newFields.append(field)
            case let existing? where existing.fieldType != field.fieldType:
                plan.conflicts.append(
                    "\(field.recordType).\(field.fieldName) is \(existing.fieldType) in production but \(field.fieldType) in development; production records hold \(existing.fieldType) values, so the type cannot change")
            case let existing? where field.indexes & ~existing.indexes != 0:
                var widened = existing
                widened.indexes |= field.indexes
                plan.newIndexes.append(widened)
            default: break
            }
        }
        plan.keptFields = productionFields.filter { !developmentNames.contains("\($0.recordType).\($0.fieldName)") }
        return plan
    }

    /// The schema in the CloudKit Schema Language, its custom roles and grants included: what
    /// `nimbus schema show` prints and the dashboard exports.
    public func schemaLanguage(container: String, environment: Environment) async throws -> String {
        let schema = try await schema(container: container, environment: environment)
        let security = try await security(container: container, environment: environment)
        var out = ["DEFINE SCHEMA"]
        for role in security.roles where !SecurityRoles.builtIn.contains(role) { out.append("\n    CREATE ROLE \(role);") }
        for recordType in schema.recordTypes {
            let rows = schema.fields.filter { $0.recordType == recordType }
            // As cktool writes a type: the six system fields first, with whatever indexes they
            // have, then the type's own fields, then its grants.
            let system = SchemaFile.systemFields.map { name, type in
                rows.first { $0.fieldName == name } ?? SchemaFieldRow(recordType: recordType, fieldName: name, fieldType: type.wireName, indexes: 0)
            }
            let own = rows.filter { SchemaFile.systemFieldType($0.fieldName) == nil }
            let width = (system + own).map { Self.schemaName($0.fieldName).count }.max() ?? 0
            let lines = (system + own).map { field -> String in
                let type = FieldType(wireName: field.fieldType)?.schemaName ?? field.fieldType
                // Only indexes the type can use (SEARCHABLE for strings, none for assets, …).
                let options = SchemaFile.indexNames(field.applicableIndexes)
                let name = Self.schemaName(field.fieldName)
                return (["    " + name + String(repeating: " ", count: width - name.count), type] + options).joined(separator: " ")
            }
            let grants = (security.grants[recordType] ?? [:]).sorted { $0.key < $1.key }.flatMap { role, permissions in
                SecurityRoles.nameList(permissions).map { "    GRANT \($0) TO \"\(role)\"" }
            }
            out.append("\n    RECORD TYPE \(recordType) (")
            out.append((lines + grants).map { "    \($0)" }.joined(separator: ",\n"))
            out.append("    );")
        }
        return out.joined(separator: "\n") + "\n"
    }

    /// A field's name as the Schema Language writes it: quoted when it is a system field.
    private static func schemaName(_ field: String) -> String { field.hasPrefix("___") ? "\"\(field)\"" : field }

    /// Sets which indexes a field has (`SchemaFieldRow.Indexes` flags): the seeds' "drop the
    /// index you never query". Returns false when the field is not in that schema.
    public func setFieldIndexes(
        container: String, environment: Environment, recordType: String, field: String, indexes: Int
    ) async throws -> Bool {
        guard (0...SchemaFieldRow.Indexes.all).contains(indexes) else {
            throw CloudKitError.badRequest("index flags must be a combination of QUERYABLE, SORTABLE and SEARCHABLE")
        }
        let systemType = Self.systemFieldTypes[field]
        // On every partition: each indexes its own records (docs/scale-out.md, "Partitions").
        return try await storage.writeEveryPartition { tx in
            if indexes != 0,
                let row = try tx.schemaFields(container: container, environment: environment).first(where: {
                    $0.recordType == recordType && $0.fieldName == field
                })
            {
                if FieldType(wireName: row.fieldType)?.isEncrypted == true {
                    throw CloudKitError.badRequest(
                        "field '\(field)' of record type '\(recordType)' is encrypted (\(row.fieldType)): the server cannot read it, so it can have no index")
                }
                let applicable = FieldType.applicableIndexes(wireName: row.fieldType)
                if indexes & ~applicable != 0 {
                    let takes = SchemaFile.indexNames(applicable)
                    throw CloudKitError.badRequest(
                        "\(recordType).\(field) is \(row.fieldType): \(SchemaFile.indexNames(indexes & ~applicable).joined(separator: " and ")) does not apply to it; it takes \(takes.isEmpty ? "no index" : takes.joined(separator: ", "))")
                }
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
        }.allSatisfy { $0 }
    }

    /// After a storage upgrade that changed what index entries hold (v6 added sorted pairs, v8
    /// exact integers), rewrites the entries of every record in both environments. Once, in
    /// one transaction, before the service answers.
    func rebuildIndexesIfRequested() async throws {
        // Containers are the home's; each partition holds the schema and its own records.
        let containers = try await storage.read { try $0.containers() }.map(\.id)
        @Sendable func rebuild(_ tx: UnitOfWork) throws {
            guard try tx.takeIndexRebuildRequest() else { return }
            for container in containers {
                for environment in [Environment.development, .production] {
                    for recordType in try tx.schemaRecordTypes(container: container, environment: environment) {
                        try self.rebuildIndexEntries(container: container, environment: environment, recordType: recordType, tx: tx)
                    }
                }
            }
        }
        try await storage.write(rebuild)
        // A partition that does not answer keeps its request for the next start, and holds
        // up no one else's.
        for partition in storage.otherPartitions {
            do {
                try await partition.store.write(rebuild)
            } catch {
                logger.error(
                    "a partition did not answer while its indexes were to be rebuilt; it asks again at the next start",
                    metadata: ["partition": "\(partition.name)", "error": "\(error)"])
            }
        }
    }

    /// Has the driver index every live record of a type again, under the grants its schema
    /// now has. Production records are indexed only as granted (`IndexGrants`), so a newly
    /// granted index must be filled in before a query may use it; development records are
    /// indexed by everything already. In the caller's transaction, so
    /// the index is complete when the change is visible.
    func rebuildIndexEntries(container: String, environment: Environment, recordType: String, tx: UnitOfWork) throws {
        var grants: [String: Int] = [:]
        for field in try tx.schemaFields(container: container, environment: environment) where field.recordType == recordType {
            grants[field.fieldName] = field.indexes
        }
        let indexGrants = IndexGrants.of(environment, grants: grants)
        var after: Int64 = 0
        while true {
            let page = try tx.liveRecords(container: container, environment: environment, recordType: recordType, afterID: after, limit: 500)
            for (id, row) in page {
                let record = IndexedRecord(row: row, fields: try RecordCodec.decode(row.fields), grants: indexGrants)
                try tx.indexRecord(recordID: id, zoneID: row.zoneID, recordType: recordType, record, hadEntries: true)
            }
            guard let last = page.last else { return }
            after = last.id
        }
    }
}
