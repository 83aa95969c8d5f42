import NimbusStorage
import NimbusWire

/// Settles each saved field's type against the schema of one container environment, inside
/// one write transaction.
///
/// In development the schema grows just in time: a new record type or field is added with
/// the type of its first value. In production the schema is locked: unknown types and fields
/// are refused. In both, a value whose type differs from the schema's is refused, naming the
/// field and both types.
final class SchemaResolver {
    private let container: String
    private let environment: Environment
    private let tx: UnitOfWork
    private var recordTypes: Set<String>
    private var fields: [String: [String: FieldType]]
    /// Index flags by record type, then field (system fields included once declared).
    private var indexFlags: [String: [String: Int]]
    /// `indexGrants(for:)`'s answers: a batch asks once per record, of the same few types.
    private var grantsByType: [String: IndexGrants]

    /// Over the schema the unit reads, through `digests` (the lookups made once per schema).
    init(container: String, environment: Environment, tx: UnitOfWork, digests: SchemaDigests) throws {
        self.container = container
        self.environment = environment
        self.tx = tx
        let digest = digests.digest(
            SchemaKey(container: container, environment: environment),
            recordTypes: try tx.schemaRecordTypes(container: container, environment: environment),
            fields: try tx.schemaFields(container: container, environment: environment))
        recordTypes = digest.recordTypes
        fields = digest.fields
        indexFlags = digest.indexFlags
        grantsByType = digest.grants
    }

    private var isLocked: Bool { environment == .production }

    /// Runs `body` in a savepoint of the change log and the transaction; when it throws, the
    /// types and fields it admitted are forgotten with the rows the savepoint took back, so a
    /// later attempt writes them again.
    func savepoint<Value>(_ log: ChangeLog, _ body: () throws -> Value) throws -> Value {
        let (admittedTypes, admittedFields) = (recordTypes, fields)  // copy-on-write: copies nothing yet
        do {
            return try log.savepoint(tx, body)
        } catch {
            recordTypes = admittedTypes
            fields = admittedFields
            throw error
        }
    }

    /// What the schema grants a saved record of `recordType` is indexed by.
    func indexGrants(for recordType: String) -> IndexGrants {
        if let grants = grantsByType[recordType] { return grants }
        let grants = IndexGrants.of(environment, grants: indexFlags[recordType] ?? [:])
        grantsByType[recordType] = grants
        return grants
    }

    /// Checks (or, in development, adds) the record type.
    func admitRecordType(_ recordType: String, path: @autoclosure () -> String) throws {
        if recordTypes.contains(recordType) { return }
        // Users and shares are in every schema, as in CloudKit: neither needs deployment.
        if isLocked, recordType != Names.usersRecordType, recordType != Names.shareRecordType {
            var error = CloudKitError.badRequest(
                "\(path()): record type '\(recordType)' is not in the production schema; save it in development, then deploy the schema (`nimbus schema deploy`)")
            error.schemaLacks = recordType
            throw error
        }
        try tx.addSchemaRecordType(container: container, environment: environment, recordType)
        recordTypes.insert(recordType)
    }

    /// The types the schema holds for the fields of `recordType`: what `resolve` checks one
    /// record's fields against, looked up once for the record instead of once per field.
    func fieldTypes(of recordType: String) -> [String: FieldType] { fields[recordType] ?? [:] }

    /// The typed value of one field of a record whose type's fields were `types` before its
    /// save (`fieldTypes(of:)`); `nil` for a `null` value (which clears the field). A field not
    /// among them is looked for again, as the save may have admitted it since.
    func resolve(_ raw: RawField, field name: String, recordType: String, types: [String: FieldType], path: @autoclosure () -> String)
        throws -> FieldValue?
    {
        if raw.value.isNull { return nil }
        let known = types[name] ?? fields[recordType]?[name]
        let type: FieldType
        switch raw.declaredType {
        case .exact(let declared)?:
            if let known, known != declared {
                throw CloudKitError.badRequest(
                    "\(path()): field '\(name)' of record type '\(recordType)' is \(known.wireName) in the schema, but the request says \(declared.wireName)")
            }
            type = declared
        case .listOfUnknown?:
            if let known {
                guard known.isList else {
                    throw CloudKitError.badRequest(
                        "\(path()): field '\(name)' of record type '\(recordType)' is \(known.wireName) in the schema, but the request sends a list")
                }
                type = known
            } else {
                guard let inferred = FieldValue.inferType(of: raw.value), inferred.isList else {
                    throw CloudKitError.badRequest(
                        "\(path()): cannot tell the element type of this list; send \"type\" as e.g. STRING_LIST")
                }
                type = inferred
            }
        case nil:
            if let known {
                type = known
            } else {
                guard let inferred = FieldValue.inferType(of: raw.value) else {
                    throw CloudKitError.badRequest(
                        "\(path()): cannot tell the type of field '\(name)' from its value; send \"type\" (STRING, INT64, DOUBLE, TIMESTAMP, BYTES, REFERENCE, ASSETID, LOCATION or a <TYPE>_LIST)")
                }
                type = inferred
            }
        }
        let value: FieldValue
        do {
            value = try FieldValue.decode(raw.value, as: type, path: path())
        } catch {
            if let known, raw.declaredType == nil {
                throw CloudKitError.badRequest("field '\(name)' of record type '\(recordType)' is \(known.wireName) in the schema: \(error.reason)")
            }
            throw error
        }
        if known == nil { try admitField(name, type: type, recordType: recordType, path: path()) }
        return value
    }

    private func admitField(_ name: String, type: FieldType, recordType: String, path: @autoclosure () -> String) throws {
        // A share's own fields (cloudkit.title, …) are in every schema, as the type is.
        let systemField = recordType == Names.shareRecordType && Names.isShareFieldName(name)
        if isLocked, systemField { return }
        if isLocked {
            var error = CloudKitError.badRequest(
                "\(path()): field '\(name)' is not in the production schema of record type '\(recordType)'; add it in development, then deploy the schema (`nimbus schema deploy`)")
            error.schemaLacks = "\(recordType).\(name)"
            throw error
        }
        // The Users type's fields start without indexes: a user directory is queryable only
        // where the developer grants it (docs/identities.md). Encrypted fields never have one.
        try tx.addSchemaField(
            container: container, environment: environment,
            SchemaFieldRow(
                recordType: recordType, fieldName: name, fieldType: type.wireName,
                indexes: recordType == Names.usersRecordType || type.isEncrypted ? 0 : SchemaFieldRow.Indexes.all))
        fields[recordType, default: [:]][name] = type
    }
}
