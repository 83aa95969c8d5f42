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

    /// Copies the development schema into production. Additive only: a field whose type
    /// differs between the two refuses the whole deploy, which changes nothing.
    /// Returns how many record types and fields were new in production.
    public func deploySchema(container: String) async throws -> (recordTypes: Int, fields: Int) {
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
            for field in developmentFields where productionFields["\(field.recordType).\(field.fieldName)"] == nil {
                try tx.addSchemaField(container: container, environment: .production, field)
                newFields += 1
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
            if try tx.setSchemaFieldIndexes(
                container: container, environment: environment, recordType: recordType, fieldName: field, indexes: indexes)
            {
                return true
            }
            // System fields exist on every type; declaring one is how it gets an index.
            guard let systemType,
                try tx.schemaRecordTypes(container: container, environment: environment).contains(recordType)
            else { return false }
            try tx.addSchemaField(
                container: container, environment: environment,
                SchemaFieldRow(recordType: recordType, fieldName: field, fieldType: systemType.wireName, indexes: indexes))
            return true
        }
    }
}
