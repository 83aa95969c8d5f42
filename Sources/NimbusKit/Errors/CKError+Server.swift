import Foundation
import NimbusWire

/// How the server's `serverErrorCode`s become the codes native CloudKit reports for the same
/// situation. One table, so every operation maps errors alike.
extension CKError {
    static func code(forServerCode serverCode: String, limitName: String?) -> Code {
        if limitName != nil { return .limitExceeded }
        guard let code = ServerErrorCode(rawValue: serverCode) else { return .serverRejectedRequest }
        switch code {
        case .accessDenied: return .permissionFailure
        case .atomicError: return .batchRequestFailed
        case .authenticationFailed, .authenticationRequired: return .notAuthenticated
        case .badRequest: return .invalidArguments
        case .conflict, .exists: return .serverRecordChanged
        case .internalError: return .internalError
        case .notFound: return .unknownItem
        case .quotaExceeded: return .quotaExceeded
        case .throttled: return .requestRateLimited
        case .tryAgainLater: return .serviceUnavailable
        case .validatingReferenceError: return .referenceViolation
        case .uniqueFieldError: return .constraintViolation
        case .zoneNotFound: return .zoneNotFound
        case .changeTokenExpired: return .changeTokenExpired
        case .zoneBusy: return .zoneBusy
        case .alreadyShared: return .alreadyShared
        default: return .serverRejectedRequest
        }
    }

    /// The error an error dictionary (reference §13.1) describes. `extra` adds userInfo
    /// entries the caller knows (the server record, the client record).
    static func fromServer(_ entry: CloudKitError, extra: [String: Any] = [:]) -> CKError {
        // Read by the server's own type; a code this SDK does not know keeps its name.
        let serverCode = entry.code.rawValue
        let reason = entry.reason.isEmpty ? "the server gave no reason" : entry.reason
        let limitName = entry.limitName
        var info = extra
        info[CKErrorServerErrorCodeKey] = serverCode
        if let limitName { info[CKErrorLimitNameKey] = limitName }
        if let seconds = entry.retryAfter { info[CKErrorRetryAfterKey] = Double(seconds) }
        return CKError(code(forServerCode: serverCode, limitName: limitName), "\(reason) (\(serverCode))", userInfo: info)
    }

    /// A `partialFailure` carrying per-item errors, as CloudKit reports a batch with failures.
    static func partialFailure(_ errors: [AnyHashable: any Error], what: String) -> CKError {
        CKError(
            .partialFailure, "\(errors.count) of the \(what) failed; see partialErrorsByItemID",
            userInfo: [CKPartialErrorsByItemIDKey: errors])
    }

    /// The same error with more userInfo.
    func adding(_ entries: [String: Any]) -> CKError {
        CKError(code, userInfo: userInfo.merging(entries) { _, new in new })
    }

    static func cancelled() -> CKError { CKError(.operationCancelled, "the operation was cancelled") }

    /// Maps any error an operation body threw: CKErrors pass through, cancellation becomes
    /// `operationCancelled`, anything else `internalError` with its description.
    static func wrapping(_ error: any Error) -> CKError {
        if let error = error as? CKError { return error }
        if error is CancellationError { return cancelled() }
        return CKError(.internalError, "unexpected error: \(error)")
    }
}
