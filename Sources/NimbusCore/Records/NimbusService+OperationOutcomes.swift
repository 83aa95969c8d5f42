import Crypto
import Foundation
import NimbusStorage
import NimbusWire

/// Modify requests that carry an `operationID` are applied once: the first request claims the
/// ID, and its answer is kept 24 hours; a retry, or a long-lived operation resumed after the
/// app relaunched, is answered from that answer (docs/protocol.md, "operationID"; docs/sdk.md, "Operations").
extension NimbusService {
    /// How long an answer is kept for retries.
    static let operationOutcomeLifetime: Int64 = 24 * 3_600 * 1_000
    /// A claim older than this without an answer was made by a node that stopped mid-request;
    /// a retry then applies anew (far longer than any request runs: the request deadline is 60 s).
    static let staleOperationClaim: Int64 = 120 * 1_000

    func appliedOnce(
        _ operationID: String, target: DatabaseTarget, request: RecordsModifyRequest,
        apply: () async throws -> RecordsResponse
    ) async throws -> RecordsResponse {
        let key = try target.key()
        // The operation is the caller's: another user's ID (or the same ID on another
        // database) is another operation.
        let outcomeKey = OperationKey(
            container: key.container, environment: key.environment, userRecordName: target.caller.stampUserRecordName,
            operationID: "\(target.scope.rawValue)/\(operationID)")
        let store = storage.operations
        let claim = try await store.claimOperation(
            outcomeKey, requestHash: Self.shapeHash(request), now: now, staleBefore: now - Self.staleOperationClaim,
            expiredBefore: now - Self.operationOutcomeLifetime)
        switch claim {
        case .done(let bytes):
            do {
                return try RecordsResponse(body: try JSON.parse(bytes))
            } catch {
                throw CloudKitError(.internalError, "the stored answer of operation '\(operationID)' does not read")
            }
        case .running:
            var busy = CloudKitError(
                .zoneBusy, "operation '\(operationID)' is being applied by an earlier request; retry to receive its answer")
            busy.retryAfter = 1
            throw busy
        case .otherRequest:
            throw CloudKitError.badRequest(
                "operationID '\(operationID)' named another request (other records or operation types) in the last 24 hours; give each request an ID of its own")
        case .claimed:
            let response: RecordsResponse
            do {
                response = try await apply()
            } catch {
                // A whole-request failure wrote nothing: the retry applies anew.
                try? await store.releaseOperation(outcomeKey)
                throw error
            }
            do {
                try await store.completeOperation(outcomeKey, response: JSONWriter.text(of: response))
            } catch {
                // Applied, answer not kept: a retry within two minutes hears ZONE_BUSY, after
                // that it applies again; the caller still gets this answer now.
                logger.warning("operation \(operationID): the answer was not kept: \(error)")
            }
            return response
        }
    }

    /// Forgets answers older than a day; the server calls it hourly, beside the notification pruning.
    @discardableResult
    public func pruneOperationOutcomes() async throws -> Int {
        try await storage.operations.pruneOperations(createdBefore: now - Self.operationOutcomeLifetime)
    }

    /// What identifies a request beside its ID: its zone, atomicity, and each operation's type,
    /// record name, record type and field names. Not the values: a client resuming after a
    /// relaunch encrypts values again (new nonces) and uploads assets again (new receipts).
    static func shapeHash(_ request: RecordsModifyRequest) -> String {
        var text = "\(request.zoneID.zoneName)|\(request.zoneID.ownerRecordName ?? "")|\(request.atomic.map { "\($0)" } ?? "-")"
        for operation in request.operations {
            let fields = (operation.record.fields ?? []).map(\.name).sorted().joined(separator: ",")
            text += "\n\(operation.type.rawValue)|\(operation.record.recordName ?? "")|\(operation.record.recordType ?? "")|\(fields)"
        }
        return Data(SHA256.hash(data: Data(text.utf8))).base64EncodedString()
    }
}
