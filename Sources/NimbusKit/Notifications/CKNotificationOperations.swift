import Foundation
import NimbusWire

/// An operation on the user's notification collection or badge: it belongs to the
/// container, not to a database. Run it with `CKContainer.add(_:)`.
open class CKContainerOperation: CKOperation, @unchecked Sendable {
    var container: CKContainer?

    var transport: NimbusTransport { journalContainer.transport }

    override var journalContainer: CKContainer { container ?? resolvedContainer(database: nil) }

    func device<Response: WireBody>(_ path: String, _ body: JSON, as: Response.Type) async throws(CKError) -> Response {
        try NimbusTransport.read(
            Response.self, from: await transport.device(path, body, timeout: effectiveConfiguration.timeoutIntervalForRequest),
            endpoint: path)
    }
}

/// Reads the notification collection after a token (`notifications/changes`): what a device
/// missed while pushes were lost, coalesced or never sent.
open class CKFetchNotificationChangesOperation: CKContainerOperation, @unchecked Sendable {
    /// Where the last fetch ended; nil reads the collection from its start (28 days).
    public var previousServerChangeToken: CKServerChangeToken?
    /// At most this many per request (up to the server's 200).
    public var resultsLimit: Int = 0
    /// Whether more notifications are waiting after this fetch: run another from its token.
    public private(set) var moreComing = false

    public var notificationChangedBlock: (@Sendable (CKNotification) -> Void)?
    public var fetchNotificationChangesResultBlock: (@Sendable (Result<CKServerChangeToken, any Error>) -> Void)?
    public var fetchNotificationChangesCompletionBlock: (@Sendable (CKServerChangeToken?, (any Error)?) -> Void)?

    private var token: CKServerChangeToken?

    public override init() { super.init() }

    public convenience init(previousServerChangeToken: CKServerChangeToken?) {
        self.init()
        self.previousServerChangeToken = previousServerChangeToken
    }

    override func run() async throws {
        let body = NotificationChangesRequest(
            syncToken: previousServerChangeToken?.syncToken,
            resultsLimit: resultsLimit > 0 ? resultsLimit : Limits.notificationsPerPage.value)
        let answer = try await device("notifications/changes", body.json, as: NotificationChangesResponse.self)
        for entry in answer.notifications {
            guard let notification = CKNotification.make(payload: entry.payload) else { continue }
            notificationChangedBlock?(notification)
        }
        moreComing = answer.moreComing
        token = CKServerChangeToken(syncToken: answer.syncToken)
    }

    override func finish(with error: CKError?) {
        if let token, error == nil {
            fetchNotificationChangesResultBlock?(.success(token))
        } else {
            fetchNotificationChangesResultBlock?(.failure(error ?? CKError(.internalError, "no token")))
        }
        fetchNotificationChangesCompletionBlock?(token, error)
    }
}

/// Marks notifications read; the user's other devices hear of it (a `readNotification`).
open class CKMarkNotificationsReadOperation: CKContainerOperation, @unchecked Sendable {
    public var notificationIDs: [CKNotification.ID]?
    public var markNotificationsReadResultBlock: (@Sendable (Result<[CKNotification.ID], any Error>) -> Void)?
    public var markNotificationsReadCompletionBlock: (@Sendable ([CKNotification.ID]?, (any Error)?) -> Void)?

    private var marked: [CKNotification.ID] = []

    public override init() { super.init() }

    public convenience init(notificationIDsToMarkRead: [CKNotification.ID]) {
        self.init()
        notificationIDs = notificationIDsToMarkRead
    }

    override func run() async throws {
        for chunk in chunked(notificationIDs ?? [], size: Limits.operationsPerRequest.value) {
            // Not `try Task.checkCancellation()`: Swift 6.3.1's optimizer crashed splitting this
            // function's coroutine at that synchronous throwing call (release builds only).
            if Task.isCancelled { throw CancellationError() }
            let answer = try await device(
                "notifications/markRead", MarkNotificationsReadRequest(notificationIDs: chunk.map(\.value)).json,
                as: MarkNotificationsReadResponse.self)
            marked += answer.notificationIDs.map(CKNotification.ID.init)
        }
    }

    override func finish(with error: CKError?) {
        markNotificationsReadResultBlock?(error.map { .failure($0) } ?? .success(marked))
        markNotificationsReadCompletionBlock?(marked, error)
    }
}

/// Sets the app's badge on all the user's devices.
open class CKModifyBadgeOperation: CKContainerOperation, @unchecked Sendable {
    public var badgeValue: Int = 0
    public var modifyBadgeResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    public var modifyBadgeCompletionBlock: (@Sendable ((any Error)?) -> Void)?

    public override init() { super.init() }

    public convenience init(badgeValue: Int) {
        self.init()
        self.badgeValue = badgeValue
    }

    override func run() async throws {
        _ = try await device("badge/modify", BadgeModifyRequest(badgeValue: Int64(badgeValue)).json, as: BadgeModifyResponse.self)
    }

    override func finish(with error: CKError?) {
        modifyBadgeResultBlock?(error.map { .failure($0) } ?? .success(()))
        modifyBadgeCompletionBlock?(error)
    }
}
