/// The outcomes of modify requests that carry an operation ID, kept 24 hours so that a retried
/// or resumed request is answered from its first outcome instead of being applied twice
/// (docs/protocol.md, "operationID"; docs/sdk.md, "Operations"). The coarse, async form of the storage protocol (see `AccountStore`).
///
/// A request first claims its key; the claim holds no answer until the request completes. A
/// claim is atomic: of two requests with one key, one applies and the other hears `running`.
public protocol OperationOutcomeStore: Sendable {
    /// Claims `key` for a request whose body hashes to `requestHash` at `now` (milliseconds).
    /// An entry created before `expiredBefore`, or a claim made before `staleBefore` that never
    /// completed (its node died mid-request), counts as absent and is taken over.
    func claimOperation(_ key: OperationKey, requestHash: String, now: Int64, staleBefore: Int64, expiredBefore: Int64)
        async throws -> OperationClaim
    /// Stores the answer of a claimed request.
    func completeOperation(_ key: OperationKey, response: [UInt8]) async throws
    /// Gives up a claim whose request changed nothing (it failed whole), so a retry applies anew.
    func releaseOperation(_ key: OperationKey) async throws
    /// Forgets entries created before `time`; returns how many.
    func pruneOperations(createdBefore time: Int64) async throws -> Int
}

/// Whose operation: one user's, in one container's environment.
public struct OperationKey: Sendable, Hashable {
    public var container: String
    public var environment: Environment
    public var userRecordName: String
    public var operationID: String

    public init(container: String, environment: Environment, userRecordName: String, operationID: String) {
        self.container = container
        self.environment = environment
        self.userRecordName = userRecordName
        self.operationID = operationID
    }
}

public enum OperationClaim: Sendable, Equatable {
    /// This request applies; complete or release the claim after.
    case claimed
    /// Another request with this key is being applied now.
    case running
    /// Applied before; this is its answer.
    case done(response: [UInt8])
    /// The key was used for another request (another body).
    case otherRequest
}
