import NimbusStorage
import NimbusWire

/// A schema written in the CloudKit Schema Language, as `schemaLanguage(container:environment:)`
/// writes it and the dashboard exports it: custom roles, record types with their fields, index
/// options and grants.
///
/// ```
/// DEFINE SCHEMA
///     CREATE ROLE Editor;
///     RECORD TYPE Note (
///         title STRING QUERYABLE SEARCHABLE,
///         "___createTime" TIMESTAMP SORTABLE,
///         tags LIST<STRING>,
///         GRANT READ TO "_world",
///         GRANT WRITE, CREATE TO "Editor"
///     );
/// ```
public struct SchemaFile: Sendable, Equatable {
    public struct RecordType: Sendable, Equatable {
        public var name: String
        public var fields: [SchemaFieldRow] = []
        /// Permissions by role; empty when the type lists no grants (its security is left as is).
        public var grants: [String: RecordPermissions] = [:]

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
        var reader = Reader(tokens: Self.tokens(text))
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
        guard var typeWord = reader.next() else { throw .badRequest("the schema file ends after field '\(name)'") }
        var spelled = typeWord.text.uppercased()
        if spelled == "ENCRYPTED" {
            guard let inner = reader.next() else { throw .badRequest("the schema file ends after ENCRYPTED") }
            typeWord = inner
            spelled = "ENCRYPTED_" + inner.text.uppercased()
        } else if spelled.hasPrefix("LIST<ENCRYPTED") {
            spelled = "LIST<ENCRYPTED_" + (reader.next()?.text.uppercased() ?? "")
        }
        // The Schema Language says ASSET where the wire says ASSETID.
        if !spelled.contains("ASSETID") { spelled = spelled.replacingOccurrences(of: "ASSET", with: "ASSETID") }
        guard case .exact(let type)? = DeclaredFieldType(wire: spelled) else {
            throw reader.unexpected(typeWord, wanted: "a field type (STRING, INT64, DOUBLE, TIMESTAMP, BYTES, REFERENCE, ASSET, LOCATION, LIST<…>, ENCRYPTED …)")
        }
        if let system = NimbusService.systemFieldTypes[name], system != type {
            throw .badRequest("line \(nameToken?.line ?? 0): system field \(name) is \(system.schemaName), not \(type.schemaName)")
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
            throw .badRequest("line \(nameToken?.line ?? 0): field '\(name)' is encrypted, so it can have no index")
        }
        return SchemaFieldRow(recordType: recordType, fieldName: name, fieldType: type.wireName, indexes: indexes)
    }

    struct Token {
        var text: String
        var line: Int
        var quoted = false
    }

    /// Words (letters, digits, `_`, `<`, `>`), quoted names, and `( ) , ;`; `//` and `--`
    /// start comments.
    static func tokens(_ text: String) -> [Token] {
        var tokens: [Token] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var rest = Substring(line)
            if let comment = rest.range(of: "//") { rest = rest[..<comment.lowerBound] }
            if let comment = rest.range(of: "--") { rest = rest[..<comment.lowerBound] }
            var index = rest.startIndex
            while index < rest.endIndex {
                let character = rest[index]
                if character.isWhitespace {
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
                    while end < rest.endIndex, !rest[end].isWhitespace, !"(),;\"".contains(rest[end]) { end = rest.index(after: end) }
                    tokens.append(Token(text: String(rest[index..<end]), line: number + 1))
                    index = end
                }
            }
        }
        return tokens
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
            if systemAllowed, NimbusService.systemFieldTypes[token.text] != nil { return token.text }
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
                for field in type.fields {
                    if existing["\(field.recordType).\(field.fieldName)"] == nil {
                        try tx.addSchemaField(container: container, environment: .development, field)
                        newFields += 1
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
