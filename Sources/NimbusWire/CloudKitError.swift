/// An error as the protocol shows it: a whole-request failure (its own HTTP status) or a
/// per-item entry inside a 200 response.
///
/// The `reason` is written for a person: it names the offending key, value or limit and
/// says what to do. Nothing internal (SQL, stack traces) ever goes into it.
public struct CloudKitError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: ServerErrorCode
    public var reason: String
    public var recordName: String?
    public var zoneID: JSON?
    public var subscriptionID: String?
    public var retryAfter: Int?
    public var redirectURL: String?
    /// The server's copy of a record, on `CONFLICT`, so a client can merge three ways.
    public var serverRecord: JSON?
    /// For limit violations: the name of the limit (see `Limits`), so SDKs can map the
    /// error to `CKError.limitExceeded` without parsing the reason.
    public var limitName: String?
    /// A whole-request failure's HTTP status when it is not its code's: 413 for a body over
    /// its bound, which the protocol has no code of its own for.
    public var statusOverride: Int?
    /// What a locked (production) schema lacked, when that is why a write was refused: a
    /// record type, or `Type.field`. Never on the wire; the server counts such refusals
    /// (docs/schema.md), so a forgotten deploy does not fail silently.
    public var schemaLacks: String?

    /// The HTTP status this error is answered with as a whole-request failure.
    public var httpStatus: Int { statusOverride ?? code.httpStatus }

    public init(
        _ code: ServerErrorCode, _ reason: String, recordName: String? = nil, zoneID: JSON? = nil,
        serverRecord: JSON? = nil, limitName: String? = nil
    ) {
        self.code = code
        self.reason = reason
        self.recordName = recordName
        self.zoneID = zoneID
        self.serverRecord = serverRecord
        self.limitName = limitName
    }

    public var description: String { "\(code): \(reason)" }

    public static func badRequest(_ reason: String) -> CloudKitError { CloudKitError(.badRequest, reason) }

    /// A count or size limit was exceeded.
    public static func limitExceeded(_ limit: Limit, actual: Int, what: String) -> CloudKitError {
        CloudKitError(
            .badRequest, "\(what) is \(actual); the limit is \(limit.value) (\(limit.name))",
            limitName: limit.name)
    }

    /// A request body over its route's bound (`413`, with the limit named as `limitExceeded` does).
    public static func bodyTooLarge(_ limit: Limit, actual: Int, what: String) -> CloudKitError {
        var error = limitExceeded(limit, actual: actual, what: what)
        error.statusOverride = 413
        return error
    }

    /// The error dictionary of reference §13.1.
    public func json(uuid: String) -> JSON {
        var object: JSONObject = [:]
        if let recordName { object[WireKey.recordName] = .string(recordName) }
        if let subscriptionID { object[WireKey.subscriptionID] = .string(subscriptionID) }
        if let zoneID { object[WireKey.zoneID] = zoneID }
        object[WireKey.uuid] = .string(uuid)
        object[WireKey.serverErrorCode] = .string(code.rawValue)
        object[WireKey.reason] = .string(reason)
        if let retryAfter { object[WireKey.retryAfter] = .int(Int64(retryAfter)) }
        if let redirectURL { object[WireKey.redirectURL] = .string(redirectURL) }
        if let serverRecord { object[WireKey.serverRecord] = serverRecord }
        if let limitName { object[WireKey.limit] = .string(limitName) }
        return .object(object)
    }

    /// Reads an error dictionary back (the SDK's side of `json(uuid:)`); nil when `json` is not
    /// one. A code this version does not know keeps its name (`ServerErrorCode.isRecognized`).
    public init?(json: JSON) {
        guard case .object(let object) = json.parsed else { return nil }
        do { try self.init(entry: ObjectReader(object, path: "")) } catch { return nil }
    }

    /// Reads an error dictionary, checking each key's type.
    public init(entry json: ObjectReader) throws(CloudKitError) {
        self.init(
            ServerErrorCode(name: try json.requiredString(WireKey.serverErrorCode)), try json.string(WireKey.reason) ?? "",
            recordName: try json.string(WireKey.recordName), zoneID: json.value(WireKey.zoneID),
            serverRecord: json.value(WireKey.serverRecord), limitName: try json.string(WireKey.limit))
        subscriptionID = try json.string(WireKey.subscriptionID)
        retryAfter = try json.int(WireKey.retryAfter).map(Int.init)
        redirectURL = try json.string(WireKey.redirectURL)
    }
}
