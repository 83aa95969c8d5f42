/// A body the server and NimbusKit exchange, one type for both sides: the writer builds it and
/// calls `json`, the reader gets it back from `init(json:)`. Requests and responses alike
/// (round trips are tested in `RequestRoundTripTests` and `ResponseRoundTripTests`).
public protocol WireBody: Sendable {
    init(json: ObjectReader) throws(CloudKitError)
    var json: JSON { get }
    /// Writes the body's JSON text: the tree `json` builds, unless the body writes itself
    /// (`StreamedWireBody`).
    func write(to writer: inout JSONWriter)
}

extension WireBody {
    public func write(to writer: inout JSONWriter) { writer.json(json) }

    /// Reads a whole body, which must be a JSON object.
    public init(body: JSON) throws(CloudKitError) {
        try self.init(json: ObjectReader(root: body))
    }
}

/// A body on the record path, written straight to text (`JSONWriter`, which says why) by its
/// one definition, `writeText(to:)`. Its `json` is that text, which readers see as the value it
/// holds (`JSON.serialized`); a reader of a `JSON` value never needs to know which it got.
public protocol StreamedWireBody: WireBody {
    func writeText(to writer: inout JSONWriter)
}

extension StreamedWireBody {
    public func write(to writer: inout JSONWriter) { writeText(to: &writer) }

    public var json: JSON { .serialized(SerializedJSON(trusted: JSONWriter.text(of: self))) }
}

/// One entry of a per-item list in a response (records, zones, subscriptions, the zones of a
/// change fetch): the item, or the error dictionary (reference §13.1) standing in its place.
/// Entries are in request order, so a reader pairs them with what it asked for.
public enum ItemResult<Item: WireBody>: StreamedWireBody {
    case success(Item)
    case failure(CloudKitError)

    public init(json: ObjectReader) throws(CloudKitError) {
        if json.object[WireKey.serverErrorCode] != nil {
            self = .failure(try CloudKitError(entry: json))
        } else {
            self = .success(try Item(json: json))
        }
    }

    /// A failure gets a fresh `uuid`, as each of CloudKit's error dictionaries does.
    public func writeText(to writer: inout JSONWriter) {
        switch self {
        case .success(let item): item.write(to: &writer)
        case .failure(let error): writer.json(error.json(uuid: UUIDText.random()))
        }
    }

    public init(_ result: Result<Item, CloudKitError>) {
        switch result {
        case .success(let item): self = .success(item)
        case .failure(let error): self = .failure(error)
        }
    }
}

extension ObjectReader {
    /// An array of objects, each read as `Item`; a missing array reads as empty.
    public func list<Item: WireBody>(_ key: String) throws(CloudKitError) -> [Item] {
        var items: [Item] = []
        for element in try array(key) ?? [] { items.append(try Item(json: element.object())) }
        return items
    }
}

extension Array where Element: WireBody {
    public var json: JSON { .array(map(\.json)) }
}

/// An answer whose list entries may each be an error inside a 200 (a `CONFLICT` for one record
/// of a batch): what the request log and the metrics count beside the request's own status,
/// since that is where CloudKit apps meet most of their errors.
public protocol ItemFailures {
    /// The `serverErrorCode` of each entry that failed, in order.
    var itemFailureCodes: [ServerErrorCode] { get }
}

extension Array {
    /// Each failure's code, read where the results lie (`compactMap` would copy every result,
    /// each success a whole record, to look at its case).
    func failureCodes<Item>() -> [ServerErrorCode] where Element == ItemResult<Item> {
        withUnsafeBufferPointer { results in
            var codes: [ServerErrorCode] = []
            for index in results.indices {
                if case .failure(let error) = results[index] { codes.append(error.code) }
            }
            return codes
        }
    }
}

extension RecordsResponse: ItemFailures {
    public var itemFailureCodes: [ServerErrorCode] { records.failureCodes() }
}

extension ZonesResponse: ItemFailures {
    public var itemFailureCodes: [ServerErrorCode] { zones.failureCodes() }
}

extension ZoneChangesResponse: ItemFailures {
    public var itemFailureCodes: [ServerErrorCode] { zones.failureCodes() }
}

extension SubscriptionsResponse: ItemFailures {
    public var itemFailureCodes: [ServerErrorCode] { subscriptions.failureCodes() }
}
