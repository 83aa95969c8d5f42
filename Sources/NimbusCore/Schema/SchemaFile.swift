import NimbusStorage
import NimbusWire

/// A schema written in the CloudKit Schema Language, as Apple's `cktool export-schema` writes it
/// and as `schemaLanguage(container:environment:)`, `nimbus schema export` and the dashboard
/// write it: custom roles, record types with their fields, index options and grants
/// (reference §15).
///
/// ```
/// DEFINE SCHEMA
///     CREATE ROLE Editor;
///     RECORD TYPE Note (
///         "___createTime" TIMESTAMP SORTABLE,
///         "___etag" STRING,
///         "___recordID" REFERENCE QUERYABLE,
///         title STRING QUERYABLE SEARCHABLE,
///         tags LIST<STRING>,
///         count NUMBER PREFERRED AS INT64,   -- cktool's spelling for a number it typed implicitly
///         GRANT READ TO "_world",
///         GRANT WRITE, CREATE TO Editor
///     );
/// ```
///
/// Every record type has the six system fields whether the file names them or not; a file
/// names them to give them indexes, and a type the file lists without naming one has none
/// on it (Apple's rule: "an index is dropped if a later schema no longer mentions the field").
public struct SchemaFile: Sendable, Equatable {
    public struct RecordType: Sendable, Equatable {
        public var name: String
        public var fields: [SchemaFieldRow] = []
        /// Permissions by role; empty when the type lists no grants (its security is left as is).
        public var grants: [String: RecordPermissions] = [:]
        /// Whether the system fields' indexes are exactly those `fields` name (a type read from a
        /// file), or are left as they are (one field added by the dashboard).
        public var listsSystemIndexes = true

        public init(name: String, fields: [SchemaFieldRow] = [], grants: [String: RecordPermissions] = [:]) {
            self.name = name
            self.fields = fields
            self.grants = grants
        }
    }

    public var roles: [String] = []
    public var recordTypes: [RecordType] = []

    public init(roles: [String] = [], recordTypes: [RecordType] = []) {
        self.roles = roles
        self.recordTypes = recordTypes
    }

    /// The system fields as cktool lists them at the top of every record type, with their types.
    /// `___etag` (the change tag) is declared but never indexed.
    public static let systemFields: [(name: String, type: FieldType)] = [
        (SystemField.createTime.rawValue, FieldType(.timestamp)), (SystemField.createdBy.rawValue, FieldType(.reference)),
        (etag, FieldType(.string)), (SystemField.modTime.rawValue, FieldType(.timestamp)),
        (SystemField.modifiedBy.rawValue, FieldType(.reference)), (SystemField.recordID.rawValue, FieldType(.reference)),
    ]
    public static let etag = "___etag"

    /// The type of a system field by name; nil for any other name.
    public static func systemFieldType(_ name: String) -> FieldType? { systemFields.first { $0.name == name }?.type }

    /// The most bytes a schema file may have.
    public static let maximumBytes = 1 << 20

    /// Each index option with its flag (`SchemaFieldRow.Indexes`), in the order the language
    /// writes them.
    public static let indexOptions: [(String, Int)] = [
        ("QUERYABLE", SchemaFieldRow.Indexes.queryable), ("SORTABLE", SchemaFieldRow.Indexes.sortable),
        ("SEARCHABLE", SchemaFieldRow.Indexes.searchable),
    ]

    /// The options `flags` holds, by name.
    public static func indexNames(_ flags: Int) -> [String] { indexOptions.filter { flags & $0.1 != 0 }.map(\.0) }

    /// The flag an option name (any case) stands for.
    public static func indexFlag(named name: String) -> Int? { indexOptions.first { $0.0 == name.uppercased() }?.1 }

    /// Parses a schema file; a mistake is `BAD_REQUEST` naming the line and what was expected.
    public init(parsing text: String) throws(CloudKitError) {
        guard text.utf8.count <= Self.maximumBytes else {
            throw .badRequest("the schema file has \(text.utf8.count) bytes; at most \(Self.maximumBytes) are read")
        }
        let (tokens, unclosedComment) = Self.tokens(text)
        if let line = unclosedComment { throw .badRequest("line \(line): the /* comment opened on line \(line) is never closed") }
        var reader = Reader(tokens: tokens)
        try reader.expect("DEFINE")
        try reader.expect("SCHEMA")
        while let word = reader.peek {
            switch word.text.uppercased() {
            case "CREATE":
                reader.next()
                try reader.expect("ROLE")
                let role = try reader.name(kind: "role name")
                roles.append(role)
                try reader.expect(";")
            case "RECORD":
                reader.next()
                try reader.expect("TYPE")
                recordTypes.append(try Self.recordType(&reader))
            default:
                throw reader.unexpected(word, wanted: "CREATE ROLE or RECORD TYPE")
            }
        }
    }

    private static func recordType(_ reader: inout Reader) throws(CloudKitError) -> RecordType {
        var type = RecordType(name: try reader.name(kind: "record type"))
        try reader.expect("(")
        while true {
            guard let word = reader.peek else { throw .badRequest("the schema file ends inside record type '\(type.name)'") }
            if word.text == ")" { break }
            if word.text.uppercased() == "GRANT" {
                reader.next()
                var permissions: RecordPermissions = []
                repeat {
                    guard let word = reader.next() else { throw .badRequest("the schema file ends inside a GRANT") }
                    guard let permission = SecurityRoles.permission(named: word.text) else {
                        throw reader.unexpected(word, wanted: "CREATE, READ or WRITE")
                    }
                    permissions.insert(permission)
                } while reader.skip(",")
                try reader.expect("TO")
                let role = try reader.name(kind: "role name")
                type.grants[role, default: []].formUnion(permissions)
            } else {
                type.fields.append(try field(&reader, recordType: type.name))
            }
            if !reader.skip(",") { break }
        }
        try reader.expect(")")
        try reader.expect(";")
        return type
    }

    private static func field(_ reader: inout Reader, recordType: String) throws(CloudKitError) -> SchemaFieldRow {
        let nameToken = reader.peek
        let name = try reader.name(kind: "field name", systemAllowed: true)
        let line = nameToken?.line ?? 0
        let type = try dataType(&reader, field: name)
        if let system = systemFieldType(name), system != type {
            throw .badRequest("line \(line): system field \(name) is \(system.schemaName), not \(type.schemaName)")
        }
        var indexes = 0
        while let option = reader.peek, option.text != ",", option.text != ")" {
            reader.next()
            guard let flag = indexFlag(named: option.text) else {
                throw reader.unexpected(option, wanted: "QUERYABLE, SORTABLE, SEARCHABLE, ',' or ')'")
            }
            indexes |= flag
        }
        if indexes != 0, type.isEncrypted {
            throw .badRequest("line \(line): field '\(name)' is encrypted, so it can have no index")
        }
        if indexes != 0, name == etag {
            throw .badRequest("line \(line): \(etag) (the change tag) cannot be indexed; list it without options or leave it out")
        }
        return SchemaFieldRow(recordType: recordType, fieldName: name, fieldType: type.wireName, indexes: indexes)
    }

    /// A data type, as one word or several: `STRING`, `LIST<INT64>`, `LIST< STRING >`,
    /// `ENCRYPTED BYTES`, `LIST<ENCRYPTED STRING>`, `ASSET`, and cktool's `NUMBER [PREFERRED AS
    /// INT64|DOUBLE]` for a number development typed implicitly. Nimbus has no untyped number:
    /// `NUMBER` pinned to a type is that type, and a bare `NUMBER` is DOUBLE, which holds every
    /// number such a field can have received.
    private static func dataType(_ reader: inout Reader, field: String) throws(CloudKitError) -> FieldType {
        guard let first = reader.next(), !first.quoted else {
            throw .badRequest("the schema file ends after field '\(field)'")
        }
        var words = [first.text.uppercased()]
        func more() throws(CloudKitError) {
            guard let word = reader.next(), !word.quoted else { throw .badRequest("line \(first.line): the type of field '\(field)' is unfinished") }
            words.append(word.text.uppercased())
        }
        if words[0] == "ENCRYPTED" { try more() }
        if words[0].hasPrefix("LIST") {
            while !words.joined().contains(">") { try more() }
        }
        if words == ["NUMBER"] {
            if reader.peek.map({ !$0.quoted && $0.text.uppercased() == "PREFERRED" }) == true {
                reader.next()
                try reader.expect("AS")
                try more()
                words = [words.last!]
                guard words == ["INT64"] || words == ["DOUBLE"] else {
                    throw .badRequest("line \(first.line): NUMBER PREFERRED AS takes INT64 or DOUBLE, found '\(Names.escaped(words[0]))'")
                }
            } else {
                words = ["DOUBLE"]
            }
        }
        var spelled = words.joined(separator: " ")
            .replacingOccurrences(of: " <", with: "<").replacingOccurrences(of: "< ", with: "<")
            .replacingOccurrences(of: " >", with: ">")
        // The Schema Language says ASSET where the wire says ASSETID.
        if !spelled.contains("ASSETID") { spelled = spelled.replacingOccurrences(of: "ASSET", with: "ASSETID") }
        guard case .exact(let type)? = DeclaredFieldType(wire: spelled) else {
            throw reader.unexpected(
                Token(text: words.joined(separator: " "), line: first.line),
                wanted: "a field type (STRING, INT64, DOUBLE, NUMBER, TIMESTAMP, BYTES, REFERENCE, ASSET, LOCATION, LIST<…>, ENCRYPTED …)")
        }
        return type
    }

    struct Token {
        var text: String
        var line: Int
        var quoted = false
    }

    /// Words (letters, digits, `_`, `<`, `>`), quoted names, and `( ) , ;`; `//` and `--`
    /// start comments to the end of the line, `/* … */` comments span lines.
    /// `unclosedComment`: the line of a `/*` the text never closes.
    static func tokens(_ text: String) -> (tokens: [Token], unclosedComment: Int?) {
        var tokens: [Token] = []
        var inBlockComment = false
        var commentLine = 0
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var rest = Substring(line)
            var index = rest.startIndex
            while index < rest.endIndex {
                let character = rest[index]
                if inBlockComment {
                    guard let end = rest[index...].range(of: "*/") else { break }
                    inBlockComment = false
                    index = end.upperBound
                } else if rest[index...].hasPrefix("/*") {
                    inBlockComment = true
                    commentLine = number + 1
                    index = rest.index(index, offsetBy: 2)
                } else if rest[index...].hasPrefix("//") || rest[index...].hasPrefix("--") {
                    rest = rest[..<index]
                } else if character.isWhitespace {
                    index = rest.index(after: index)
                } else if "(),;".contains(character) {
                    tokens.append(Token(text: String(character), line: number + 1))
                    index = rest.index(after: index)
                } else if character == "\"" {
                    let start = rest.index(after: index)
                    let end = rest[start...].firstIndex(of: "\"") ?? rest.endIndex
                    tokens.append(Token(text: String(rest[start..<end]), line: number + 1, quoted: true))
                    index = end < rest.endIndex ? rest.index(after: end) : end
                } else {
                    var end = index
                    while end < rest.endIndex, !rest[end].isWhitespace, !"(),;\"".contains(rest[end]),
                        !rest[end...].hasPrefix("--"), !rest[end...].hasPrefix("//"), !rest[end...].hasPrefix("/*")
                    {
                        end = rest.index(after: end)
                    }
                    tokens.append(Token(text: String(rest[index..<end]), line: number + 1))
                    index = end
                }
            }
        }
        return (tokens, inBlockComment ? commentLine : nil)
    }

    struct Reader {
        let tokens: [Token]
        var position = 0

        var peek: Token? { position < tokens.count ? tokens[position] : nil }

        @discardableResult
        mutating func next() -> Token? {
            defer { position += 1 }
            return peek
        }

        mutating func skip(_ text: String) -> Bool {
            guard let token = peek, !token.quoted, token.text == text else { return false }
            position += 1
            return true
        }

        mutating func expect(_ text: String) throws(CloudKitError) {
            guard let token = next() else { throw .badRequest("the schema file ends where '\(text)' was expected") }
            guard !token.quoted, token.text.uppercased() == text else { throw unexpected(token, wanted: "'\(text)'") }
        }

        mutating func name(kind: String, systemAllowed: Bool = false) throws(CloudKitError) -> String {
            guard let token = next() else { throw .badRequest("the schema file ends where a \(kind) was expected") }
            if systemAllowed, SchemaFile.systemFieldType(token.text) != nil { return token.text }
            if kind == "role name", SecurityRoles.builtIn.contains(token.text) { return token.text }
            try Names.validateIdentifier(token.text, kind: kind, path: "line \(token.line)")
            return token.text
        }

        func unexpected(_ token: Token, wanted: String) -> CloudKitError {
            .badRequest("line \(token.line): expected \(wanted), found '\(Names.escaped(token.text))'")
        }
    }
}

extension NimbusService {
    /// What importing a schema file changed.
    public struct SchemaImport: Sendable {
        public var newRecordTypes = 0
        public var newFields = 0
        public var newRoles = 0
    }

    /// Adds a schema file's roles, record types, fields, indexes and grants to a container's
    /// development schema. Additive: a field already there with another type refuses the whole
    /// file, and nothing in the schema that the file leaves out is removed. A type that lists
    /// grants gets exactly those (built-in roles it does not name get none).
    public func importSchema(_ file: SchemaFile, container: String) async throws -> SchemaImport {
        var outcome = SchemaImport()
        let security = try await accounts.securityState()[container, .development]
        let declared = Set(file.roles).union(security.roles).union(SecurityRoles.builtIn)
        for type in file.recordTypes {
            if let unknown = type.grants.keys.sorted().first(where: { !declared.contains($0) }) {
                throw CloudKitError.badRequest("record type \(type.name) grants to role '\(unknown)', which the file does not create")
            }
        }
        (outcome.newRecordTypes, outcome.newFields) = try await storage.write { tx in
            try Self.requireContainer(container, tx: tx)
            let types = Set(try tx.schemaRecordTypes(container: container, environment: .development))
            var existing: [String: SchemaFieldRow] = [:]
            for field in try tx.schemaFields(container: container, environment: .development) {
                existing["\(field.recordType).\(field.fieldName)"] = field
            }
            let conflicts = file.recordTypes.flatMap(\.fields).compactMap { field -> String? in
                guard let known = existing["\(field.recordType).\(field.fieldName)"], known.fieldType != field.fieldType else { return nil }
                return "\(field.recordType).\(field.fieldName) is \(known.fieldType) in development, the file says \(field.fieldType)"
            }
            guard conflicts.isEmpty else {
                throw CloudKitError.badRequest("cannot import: \(conflicts.joined(separator: "; ")); a field's type cannot change")
            }
            var newTypes = 0
            var newFields = 0
            for type in file.recordTypes {
                if !types.contains(type.name) {
                    try tx.addSchemaRecordType(container: container, environment: .development, type.name)
                    newTypes += 1
                }
                // A system field's row holds only its indexes: one the type no longer names loses them.
                let named = Set(type.fields.map(\.fieldName))
                for (name, _) in SchemaFile.systemFields where type.listsSystemIndexes && !named.contains(name) {
                    if let row = existing["\(type.name).\(name)"], row.indexes != 0 {
                        _ = try tx.setSchemaFieldIndexes(
                            container: container, environment: .development, recordType: type.name, fieldName: name, indexes: 0)
                    }
                }
                for field in type.fields {
                    let isSystem = SchemaFile.systemFieldType(field.fieldName) != nil
                    if existing["\(field.recordType).\(field.fieldName)"] == nil {
                        // Declared without an index, a system field is what every type has already.
                        if isSystem, field.indexes == 0 { continue }
                        try tx.addSchemaField(container: container, environment: .development, field)
                        if !isSystem { newFields += 1 }
                    } else {
                        _ = try tx.setSchemaFieldIndexes(
                            container: container, environment: .development, recordType: field.recordType, fieldName: field.fieldName,
                            indexes: field.indexes)
                    }
                }
            }
            return (newTypes, newFields)
        }
        for role in file.roles where !SecurityRoles.builtIn.contains(role) && !security.roles.contains(role) {
            if try await accounts.createRole(container: container, environment: .development, name: role, createdAt: now) {
                outcome.newRoles += 1
            }
        }
        for type in file.recordTypes where !type.grants.isEmpty {
            for role in Set(type.grants.keys).union(SecurityRoles.builtIn).sorted() {
                try await accounts.setGrant(
                    container: container, environment: .development,
                    SecurityGrant(recordType: type.name, role: role, permissions: type.grants[role] ?? []))
            }
        }
        securityCache.clear()
        return outcome
    }
}

extension NimbusService {
    /// What `file` declares that an environment's schema lacks, one sentence each: a role, a
    /// record type, a field (or a field of another type), an index, a grant. Empty when the
    /// environment has everything the file needs; what the environment has beyond the file is
    /// not a difference (production keeps old clients' fields). `nimbus schema check` runs this
    /// in an app's CI against production, so a missing deploy fails there and not on devices.
    public func schemaDifferences(_ file: SchemaFile, container: String, environment: Environment) async throws -> [String] {
        try await requireContainer(container)
        let schema = try await schema(container: container, environment: environment)
        let security = try await security(container: container, environment: environment)
        let name = environment.rawValue
        var missing: [String] = []
        for role in file.roles where !security.roles.contains(role) {
            missing.append("role \(role) is not in \(name)")
        }
        let types = Set(schema.recordTypes)
        var rows: [String: SchemaFieldRow] = [:]
        for row in schema.fields { rows["\(row.recordType).\(row.fieldName)"] = row }
        for type in file.recordTypes {
            guard types.contains(type.name) else {
                missing.append("record type \(type.name) is not in \(name)")
                continue
            }
            for field in type.fields {
                let path = "\(type.name).\(field.fieldName)"
                let wanted = FieldType(wireName: field.fieldType)?.schemaName ?? field.fieldType
                let isSystem = SchemaFile.systemFieldType(field.fieldName) != nil
                let row = rows[path]
                if !isSystem {
                    guard let row else {
                        missing.append("field \(path) (\(wanted)) is not in \(name)")
                        continue
                    }
                    if row.fieldType != field.fieldType {
                        let has = FieldType(wireName: row.fieldType)?.schemaName ?? row.fieldType
                        missing.append("field \(path) is \(has) in \(name), the file says \(wanted)")
                        continue
                    }
                }
                let lacking = field.indexes & ~(row?.indexes ?? 0)
                if lacking != 0 {
                    missing.append("field \(path) has no \(SchemaFile.indexNames(lacking).joined(separator: ", ")) index in \(name)")
                }
            }
            let granted = security.grants[type.name] ?? [:]
            for (role, permissions) in type.grants.sorted(by: { $0.key < $1.key }) {
                let lacking = permissions.subtracting(granted[role] ?? [])
                if !lacking.isEmpty {
                    missing.append("record type \(type.name) does not grant \(SecurityRoles.names(lacking)) to \(role) in \(name)")
                }
            }
        }
        return missing
    }
}
