/// A `serverErrorCode` of the CloudKit Web Services protocol and the HTTP status it travels with.
///
/// A struct over a private enum, so codes can be added without breaking exhaustive switches
/// in code that uses them.
public struct ServerErrorCode: Hashable, Sendable, CustomStringConvertible {
    private enum Base: String, Sendable {
        case accessDenied = "ACCESS_DENIED"
        case atomicError = "ATOMIC_ERROR"
        case authenticationFailed = "AUTHENTICATION_FAILED"
        case authenticationRequired = "AUTHENTICATION_REQUIRED"
        case badRequest = "BAD_REQUEST"
        case conflict = "CONFLICT"
        case exists = "EXISTS"
        case internalError = "INTERNAL_ERROR"
        case notFound = "NOT_FOUND"
        case quotaExceeded = "QUOTA_EXCEEDED"
        case throttled = "THROTTLED"
        case tryAgainLater = "TRY_AGAIN_LATER"
        case validatingReferenceError = "VALIDATING_REFERENCE_ERROR"
        case uniqueFieldError = "UNIQUE_FIELD_ERROR"
        case zoneNotFound = "ZONE_NOT_FOUND"
        case changeTokenExpired = "CHANGE_TOKEN_EXPIRED"
        case zoneBusy = "ZONE_BUSY"
        case alreadyShared = "ALREADY_SHARED"
    }

    /// nil for a code this version does not know (read from a newer server): kept by `name`.
    private let base: Base?
    private let name: String

    public static let accessDenied = ServerErrorCode(base: .accessDenied)
    public static let atomicError = ServerErrorCode(base: .atomicError)
    public static let authenticationFailed = ServerErrorCode(base: .authenticationFailed)
    public static let authenticationRequired = ServerErrorCode(base: .authenticationRequired)
    public static let badRequest = ServerErrorCode(base: .badRequest)
    public static let conflict = ServerErrorCode(base: .conflict)
    public static let exists = ServerErrorCode(base: .exists)
    public static let internalError = ServerErrorCode(base: .internalError)
    public static let notFound = ServerErrorCode(base: .notFound)
    public static let quotaExceeded = ServerErrorCode(base: .quotaExceeded)
    public static let throttled = ServerErrorCode(base: .throttled)
    public static let tryAgainLater = ServerErrorCode(base: .tryAgainLater)
    public static let validatingReferenceError = ServerErrorCode(base: .validatingReferenceError)
    public static let uniqueFieldError = ServerErrorCode(base: .uniqueFieldError)
    public static let zoneNotFound = ServerErrorCode(base: .zoneNotFound)
    /// Nimbus's one addition to Apple's list: a sync token that predates a zone's deletion
    /// and re-creation. Native CloudKit reports it as `CKError.changeTokenExpired`; the
    /// client must drop its cache of the zone and fetch from no token.
    public static let changeTokenExpired = ServerErrorCode(base: .changeTokenExpired)
    /// Nimbus's second addition: more writers in one zone at once than the server lets in
    /// (docs/limits.md), with `retryAfter`. Native CloudKit reports it as `CKError.zoneBusy`.
    public static let zoneBusy = ServerErrorCode(base: .zoneBusy)
    /// Nimbus's third: a record that would join a second share (docs/sharing.md). Native
    /// CloudKit reports it as `CKError.alreadyShared`.
    public static let alreadyShared = ServerErrorCode(base: .alreadyShared)

    public init?(rawValue: String) {
        guard let base = Base(rawValue: rawValue) else { return nil }
        self.init(base: base)
    }

    /// Any code a response names, known or not: a reader keeps an unknown code's name so the
    /// SDK can still report it.
    public init(name: String) {
        base = Base(rawValue: name)
        self.name = name
    }

    /// Whether this version knows the code.
    public var isRecognized: Bool { base != nil }

    private init(base: Base) {
        self.base = base
        name = base.rawValue
    }

    public var rawValue: String { name }
    public var description: String { name }

    /// The HTTP status of a whole-request failure with this code (reference §13.2).
    public var httpStatus: Int {
        guard let base else { return 500 }
        switch base {
        case .accessDenied: return 403
        case .atomicError, .badRequest, .changeTokenExpired: return 400
        case .authenticationFailed: return 401
        case .authenticationRequired: return 421
        case .conflict, .exists, .uniqueFieldError, .alreadyShared: return 409
        case .internalError: return 500
        case .notFound, .zoneNotFound: return 404
        case .quotaExceeded: return 413
        case .throttled: return 429
        case .tryAgainLater, .zoneBusy: return 503
        case .validatingReferenceError: return 412
        }
    }
}
