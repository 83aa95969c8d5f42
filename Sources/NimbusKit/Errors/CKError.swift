import Foundation

/// The error domain of every error NimbusKit reports, as CloudKit names it.
public let CKErrorDomain = "CKErrorDomain"

// The userInfo keys CloudKit documents. Apps read them through `CKError`'s accessors or,
// as the seeds do, straight from `userInfo`.
public let CKPartialErrorsByItemIDKey = "CKPartialErrors"
public let CKRecordChangedErrorAncestorRecordKey = "AncestorRecord"
public let CKRecordChangedErrorServerRecordKey = "ServerRecord"
public let CKRecordChangedErrorClientRecordKey = "ClientRecord"
public let CKErrorRetryAfterKey = "CKRetryAfter"
/// Nimbus's own: the server's `serverErrorCode` behind an error, for diagnostics.
public let CKErrorServerErrorCodeKey = "NimbusServerErrorCode"
/// Nimbus's own: the named server limit an error is about (`docs/limits.md`).
public let CKErrorLimitNameKey = "NimbusLimitName"

/// A CloudKit error: a code from CloudKit's list and a userInfo dictionary with the keys above.
/// Catch it as `catch let error as CKError` and switch on `error.code`, or bridge it to
/// `NSError` (domain `CKErrorDomain`).
public struct CKError: Error, CustomNSError, Hashable, @unchecked Sendable, CustomStringConvertible {
    /// CloudKit's error codes, with CloudKit's raw values.
    public enum Code: Int, Sendable, Hashable, CaseIterable {
        case internalError = 1
        case partialFailure = 2
        case networkUnavailable = 3
        case networkFailure = 4
        case badContainer = 5
        case serviceUnavailable = 6
        case requestRateLimited = 7
        case missingEntitlement = 8
        case notAuthenticated = 9
        case permissionFailure = 10
        case unknownItem = 11
        case invalidArguments = 12
        case resultsTruncated = 13
        case serverRecordChanged = 14
        case serverRejectedRequest = 15
        case assetFileNotFound = 16
        case assetFileModified = 17
        case incompatibleVersion = 18
        case constraintViolation = 19
        case operationCancelled = 20
        case changeTokenExpired = 21
        case batchRequestFailed = 22
        case zoneBusy = 23
        case badDatabase = 24
        case quotaExceeded = 25
        case zoneNotFound = 26
        case limitExceeded = 27
        case userDeletedZone = 28
        case tooManyParticipants = 29
        case alreadyShared = 30
        case referenceViolation = 31
        case managedAccountRestricted = 32
        case participantMayNeedVerification = 33
        case serverResponseLost = 34
        case assetNotAvailable = 35
        case accountTemporarilyUnavailable = 36
    }

    public let code: Code
    public let userInfo: [String: Any]

    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        self.code = code
        self.userInfo = userInfo
    }

    /// An error with a description a person can act on.
    init(_ code: Code, _ description: String, userInfo: [String: Any] = [:]) {
        var info = userInfo
        info[NSLocalizedDescriptionKey] = description
        self.init(code, userInfo: info)
    }

    // MARK: CustomNSError

    public static var errorDomain: String { CKErrorDomain }
    public var errorCode: Int { code.rawValue }
    public var errorUserInfo: [String: Any] { userInfo }

    public var localizedDescription: String {
        (userInfo[NSLocalizedDescriptionKey] as? String) ?? "CloudKit error \(code.rawValue) (\(code))"
    }

    public var description: String { "CKError(\(code)): \(localizedDescription)" }

    // MARK: Accessors CloudKit offers

    /// Per-item errors of a `partialFailure`, keyed by `CKRecord.ID` or `CKRecordZone.ID`.
    public var partialErrorsByItemID: [AnyHashable: any Error]? {
        userInfo[CKPartialErrorsByItemIDKey] as? [AnyHashable: any Error]
    }

    public var serverRecord: CKRecord? { userInfo[CKRecordChangedErrorServerRecordKey] as? CKRecord }
    public var clientRecord: CKRecord? { userInfo[CKRecordChangedErrorClientRecordKey] as? CKRecord }
    public var ancestorRecord: CKRecord? { userInfo[CKRecordChangedErrorAncestorRecordKey] as? CKRecord }

    /// Seconds to wait before retrying, for `serviceUnavailable`, `zoneBusy` and `requestRateLimited`.
    public var retryAfterSeconds: Double? {
        if let seconds = userInfo[CKErrorRetryAfterKey] as? Double { return seconds }
        return (userInfo[CKErrorRetryAfterKey] as? NSNumber)?.doubleValue
    }

    // MARK: Hashable (by code and description, as errors are compared in tests and logs)

    public static func == (lhs: CKError, rhs: CKError) -> Bool {
        lhs.code == rhs.code && lhs.localizedDescription == rhs.localizedDescription
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(localizedDescription)
    }

    // `catch CKError.serverRecordChanged` and `error.code == .partialFailure`, as with CloudKit.
    public static let internalError = Code.internalError
    public static let partialFailure = Code.partialFailure
    public static let networkUnavailable = Code.networkUnavailable
    public static let networkFailure = Code.networkFailure
    public static let serviceUnavailable = Code.serviceUnavailable
    public static let requestRateLimited = Code.requestRateLimited
    public static let notAuthenticated = Code.notAuthenticated
    public static let permissionFailure = Code.permissionFailure
    public static let unknownItem = Code.unknownItem
    public static let invalidArguments = Code.invalidArguments
    public static let serverRecordChanged = Code.serverRecordChanged
    public static let serverRejectedRequest = Code.serverRejectedRequest
    public static let constraintViolation = Code.constraintViolation
    public static let operationCancelled = Code.operationCancelled
    public static let changeTokenExpired = Code.changeTokenExpired
    public static let batchRequestFailed = Code.batchRequestFailed
    public static let zoneBusy = Code.zoneBusy
    public static let quotaExceeded = Code.quotaExceeded
    public static let zoneNotFound = Code.zoneNotFound
    public static let limitExceeded = Code.limitExceeded
    public static let referenceViolation = Code.referenceViolation
}

/// Lets `catch CKError.unknownItem { … }` match an error by code.
public func ~= (code: CKError.Code, error: any Error) -> Bool {
    (error as? CKError)?.code == code
}
