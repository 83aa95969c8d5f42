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
