/// The admin API's schema bodies (docs/schema.md): a schema file's text sent for a check or a
/// deploy, and what a check found missing.

/// `POST …/schema/ENV/check` and `…/import`: the text of a schema file.
public struct SchemaText: WireBody, Hashable {
    public var text: String

    public init(text: String) { self.text = text }

    public init(json: ObjectReader) throws(CloudKitError) { text = try json.requiredString(ConsoleKey.text) }

    public var json: JSON { [ConsoleKey.text: .string(text)] }
}

/// A check's answer: each thing the file declares that the environment lacks, one line each
/// (empty: the environment has everything).
public struct SchemaCheckAnswer: WireBody, Hashable {
    public var missing: [String]

    public init(missing: [String]) { self.missing = missing }

    public init(json: ObjectReader) throws(CloudKitError) {
        guard let missing = try json.stringArray(ConsoleKey.missing) else { throw json.missing(ConsoleKey.missing) }
        self.missing = missing
    }

    public var json: JSON { [ConsoleKey.missing: .strings(missing)] }
}

/// `GET containers/C/schema/ENV`: the environment's record types (fields, indexes, grants) and
/// roles; for production, the writes the locked schema refused, by what they lacked.
public struct SchemaView: WireBody, Hashable {
    public struct Field: WireBody, Hashable {
        public var name: String
        public var type: String
        public var indexes: [String]
        /// The indexes a field of this type can have.
        public var applicableIndexes: [String]

        public init(name: String, type: String, indexes: [String], applicableIndexes: [String]) {
            self.name = name
            self.type = type
            self.indexes = indexes
            self.applicableIndexes = applicableIndexes
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            type = try json.requiredString(ConsoleKey.type)
            indexes = try json.stringArray(ConsoleKey.indexes) ?? []
            applicableIndexes = try json.stringArray(ConsoleKey.applicableIndexes) ?? []
        }

        public var json: JSON {
            [
                ConsoleKey.name: .string(name), ConsoleKey.type: .string(type), ConsoleKey.indexes: .strings(indexes),
                ConsoleKey.applicableIndexes: .strings(applicableIndexes),
            ]
        }
    }

    public struct RecordType: WireBody, Hashable {
        public var name: String
        public var fields: [Field]
        /// Each role's permissions on the type (`CREATE`, `READ`, `WRITE`).
        public var grants: [String: [String]]

        public init(name: String, fields: [Field], grants: [String: [String]]) {
            self.name = name
            self.fields = fields
            self.grants = grants
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            fields = try json.list(ConsoleKey.fields)
            grants = [:]
            if let given = try json.object(ConsoleKey.grants) {
                for (role, _) in given.object.pairs { grants[role] = try given.stringArray(role) ?? [] }
            }
        }

        public var json: JSON {
            var grantObject = JSONObject()
            for (role, permissions) in grants.sorted(by: { $0.key < $1.key }) { grantObject[role] = .strings(permissions) }
            return [ConsoleKey.name: .string(name), ConsoleKey.fields: fields.json, ConsoleKey.grants: .object(grantObject)]
        }
    }

    /// Writes production refused for lack of a type or field, counted, with the latest.
    public struct Refusal: WireBody, Hashable {
        public var missing: String
        public var count: Int64
        public var lastAt: Int64

        public init(missing: String, count: Int64, lastAt: Int64) {
            self.missing = missing
            self.count = count
            self.lastAt = lastAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            missing = try json.requiredString(ConsoleKey.missing)
            count = try json.int(ConsoleKey.count) ?? 0
            lastAt = try json.int(ConsoleKey.lastAt) ?? 0
        }

        public var json: JSON { [ConsoleKey.missing: .string(missing), ConsoleKey.count: .int(count), ConsoleKey.lastAt: .int(lastAt)] }
    }

    public var recordTypes: [RecordType]
    public var roles: [String]
    /// Production only.
    public var refusedWrites: [Refusal]?

    public init(recordTypes: [RecordType], roles: [String], refusedWrites: [Refusal]?) {
        self.recordTypes = recordTypes
        self.roles = roles
        self.refusedWrites = refusedWrites
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordTypes = try json.list(ConsoleKey.recordTypes)
        roles = try json.stringArray(ConsoleKey.roles) ?? []
        refusedWrites = try json.array(ConsoleKey.refusedWrites) == nil ? nil : try json.list(ConsoleKey.refusedWrites)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.recordTypes: recordTypes.json, ConsoleKey.roles: .strings(roles)]
        if let refusedWrites { object[ConsoleKey.refusedWrites] = refusedWrites.json }
        return .object(object)
    }
}

/// A field named with its record type: in a deploy's plan, and in a request to add a field or
/// set its indexes (`type` then names the field's type; an index change sends none).
public struct SchemaFieldEntry: WireBody, Hashable {
    public var recordType: String
    public var field: String
    public var type: String?
    public var indexes: [String]

    public init(recordType: String, field: String, type: String?, indexes: [String]) {
        self.recordType = recordType
        self.field = field
        self.type = type
        self.indexes = indexes
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordType = try json.requiredString(ConsoleKey.recordType)
        field = try json.requiredString(ConsoleKey.field)
        type = try json.string(ConsoleKey.type)
        indexes = try json.stringArray(ConsoleKey.indexes) ?? []
    }

    public var json: JSON {
        var object: JSONObject = [
            ConsoleKey.recordType: .string(recordType), ConsoleKey.field: .string(field), ConsoleKey.indexes: .strings(indexes),
        ]
        if let type { object[ConsoleKey.type] = .string(type) }
        return .object(object)
    }
}

/// A role's permissions on a record type: in a deploy's plan, and `POST grants/ENV`, which
/// grants them (or, with `granting: false`, takes them back).
public struct RoleGrant: WireBody, Hashable {
    public var recordType: String
    public var role: String
    public var permissions: [String]
    public var granting: Bool

    public init(recordType: String, role: String, permissions: [String], granting: Bool = true) {
        self.recordType = recordType
        self.role = role
        self.permissions = permissions
        self.granting = granting
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordType = try json.requiredString(ConsoleKey.recordType)
        role = try json.requiredString(ConsoleKey.role)
        permissions = try json.stringArray(ConsoleKey.permissions) ?? []
        granting = try json.bool(ConsoleKey.granting) ?? true
    }

    public var json: JSON {
        var object: JSONObject = [
            ConsoleKey.recordType: .string(recordType), ConsoleKey.role: .string(role), ConsoleKey.permissions: .strings(permissions),
        ]
        if !granting { object[ConsoleKey.granting] = .bool(false) }
        return .object(object)
    }
}

/// `GET containers/C/schema/deploy`: what deploying development would add to production, what
/// production keeps that development lacks (a deploy never deletes), and what conflicts.
public struct DeployPlan: WireBody, Hashable {
    public var newRecordTypes: [String]
    public var newFields: [SchemaFieldEntry]
    public var newIndexes: [SchemaFieldEntry]
    public var keptFields: [SchemaFieldEntry]
    public var conflicts: [String]
    public var newRoles: [String]
    public var changedGrants: [RoleGrant]

    public init(
        newRecordTypes: [String], newFields: [SchemaFieldEntry], newIndexes: [SchemaFieldEntry], keptFields: [SchemaFieldEntry],
        conflicts: [String], newRoles: [String], changedGrants: [RoleGrant]
    ) {
        self.newRecordTypes = newRecordTypes
        self.newFields = newFields
        self.newIndexes = newIndexes
        self.keptFields = keptFields
        self.conflicts = conflicts
        self.newRoles = newRoles
        self.changedGrants = changedGrants
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        newRecordTypes = try json.stringArray(ConsoleKey.newRecordTypes) ?? []
        newFields = try json.list(ConsoleKey.newFields)
        newIndexes = try json.list(ConsoleKey.newIndexes)
        keptFields = try json.list(ConsoleKey.keptFields)
        conflicts = try json.stringArray(ConsoleKey.conflicts) ?? []
        newRoles = try json.stringArray(ConsoleKey.newRoles) ?? []
        changedGrants = try json.list(ConsoleKey.changedGrants)
    }

    public var json: JSON {
        [
            ConsoleKey.newRecordTypes: .strings(newRecordTypes), ConsoleKey.newFields: newFields.json,
            ConsoleKey.newIndexes: newIndexes.json, ConsoleKey.keptFields: keptFields.json, ConsoleKey.conflicts: .strings(conflicts),
            ConsoleKey.newRoles: .strings(newRoles), ConsoleKey.changedGrants: changedGrants.json,
        ]
    }
}

/// What a deploy or an import added: record types, fields and roles.
public struct SchemaAdditions: WireBody, Hashable {
    public var recordTypes: Int64
    public var fields: Int64
    public var roles: Int64

    public init(recordTypes: Int, fields: Int, roles: Int) {
        self.recordTypes = Int64(recordTypes)
        self.fields = Int64(fields)
        self.roles = Int64(roles)
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordTypes = try json.int(ConsoleKey.recordTypes) ?? 0
        fields = try json.int(ConsoleKey.fields) ?? 0
        roles = try json.int(ConsoleKey.roles) ?? 0
    }

    public var json: JSON { [ConsoleKey.recordTypes: .int(recordTypes), ConsoleKey.fields: .int(fields), ConsoleKey.roles: .int(roles)] }
}

/// `POST …/schema/development/fields`' answer: whether the field is new (false: it was there).
public struct FieldAdded: WireBody, Hashable {
    public var added: Bool

    public init(added: Bool) { self.added = added }
    public init(json: ObjectReader) throws(CloudKitError) { added = try json.bool(ConsoleKey.added) ?? false }
    public var json: JSON { [ConsoleKey.added: .bool(added)] }
}

/// `POST …/schema/development/remove`: a field, or without one the whole record type.
public struct SchemaRemoval: WireBody, Hashable {
    public var recordType: String
    public var field: String?

    public init(recordType: String, field: String?) {
        self.recordType = recordType
        self.field = field
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordType = try json.requiredString(ConsoleKey.recordType)
        field = try json.string(ConsoleKey.field)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.recordType: .string(recordType)]
        if let field { object[ConsoleKey.field] = .string(field) }
        return .object(object)
    }
}

public struct SchemaRemoved: WireBody, Hashable {
    public var removed: Bool

    public init(removed: Bool = true) { self.removed = removed }
    public init(json: ObjectReader) throws(CloudKitError) { removed = try json.bool(ConsoleKey.removed) ?? false }
    public var json: JSON { [ConsoleKey.removed: .bool(removed)] }
}

/// `POST …/schema/ENV/indexes`' answer: the field's indexes now.
public struct FieldIndexes: WireBody, Hashable {
    public var indexes: [String]

    public init(indexes: [String]) { self.indexes = indexes }
    public init(json: ObjectReader) throws(CloudKitError) { indexes = try json.stringArray(ConsoleKey.indexes) ?? [] }
    public var json: JSON { [ConsoleKey.indexes: .strings(indexes)] }
}

/// `POST roles/ENV` `{name}`: a custom role.
public struct RoleCreation: WireBody, Hashable {
    public var name: String

    public init(name: String) { self.name = name }
    public init(json: ObjectReader) throws(CloudKitError) { name = try json.requiredString(ConsoleKey.name) }
    public var json: JSON { [ConsoleKey.name: .string(name)] }
}

/// A role change's answer: the role, and for an assignment whether it is now assigned.
public struct RoleChanged: WireBody, Hashable {
    public var role: String
    public var assigned: Bool?

    public init(role: String, assigned: Bool? = nil) {
        self.role = role
        self.assigned = assigned
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        role = try json.requiredString(ConsoleKey.role)
        assigned = try json.bool(ConsoleKey.assigned)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.role: .string(role)]
        if let assigned { object[ConsoleKey.assigned] = .bool(assigned) }
        return .object(object)
    }
}

/// `POST reset/development` `{confirm}`: the container's identifier, typed again.
public struct DevelopmentResetConfirmation: WireBody, Hashable {
    public var confirm: String?

    public init(confirm: String?) { self.confirm = confirm }
    public init(json: ObjectReader) throws(CloudKitError) { confirm = try json.string(ConsoleKey.confirm) }

    public var json: JSON {
        var object = JSONObject()
        if let confirm { object[ConsoleKey.confirm] = .string(confirm) }
        return .object(object)
    }
}

/// What resetting development took away.
public struct DevelopmentResetOutcome: WireBody, Hashable {
    public var databases: Int64
    public var zones: Int64
    public var subscriptions: Int64

    public init(databases: Int, zones: Int, subscriptions: Int) {
        self.databases = Int64(databases)
        self.zones = Int64(zones)
        self.subscriptions = Int64(subscriptions)
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        databases = try json.int(ConsoleKey.databases) ?? 0
        zones = try json.int(ConsoleKey.zones) ?? 0
        subscriptions = try json.int(ConsoleKey.subscriptions) ?? 0
    }

    public var json: JSON {
        [ConsoleKey.databases: .int(databases), ConsoleKey.zones: .int(zones), ConsoleKey.subscriptions: .int(subscriptions)]
    }
}
