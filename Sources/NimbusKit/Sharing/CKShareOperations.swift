import Foundation
import NimbusWire

extension CKShare {
    /// What a share's URL leads to, for the person opening it (`records/resolve`): the share as
    /// they may see it, its root, its owner, and their own place in it.
    public final class Metadata: NSObject, @unchecked Sendable {
        public let containerIdentifier: String
        public let share: CKShare
        /// The root of a hierarchy share; nil for a zone-wide share.
        public let hierarchicalRootRecordID: CKRecord.ID?
        /// The root record itself, when the fetch asked for it (`shouldFetchRootRecord`).
        public let rootRecord: CKRecord?
        public let ownerIdentity: CKUserIdentity
        public let participantRole: CKShare.ParticipantRole
        public let participantStatus: CKShare.ParticipantAcceptanceStatus
        public let participantPermission: CKShare.ParticipantPermission
        /// The short GUID of the URL.
        let shortGUID: String
        /// What `records/resolve` answered: a long-lived accept journals it, to hand the
        /// same metadata to its callbacks after a relaunch.
        let info: ShareInfo

        @available(*, deprecated, renamed: "hierarchicalRootRecordID")
        public var rootRecordID: CKRecord.ID { hierarchicalRootRecordID ?? share.recordID }

        init(_ info: ShareInfo, currentUser: String?) throws(CKError) {
            let zoneID = WireRecordCoder.zoneID(info.zoneID, currentUser: currentUser)
            guard let share = try WireRecordCoder.record(info.share, zoneID: zoneID, currentUser: currentUser) as? CKShare else {
                throw CKError(.serverResponseLost, "the server's answer to records/resolve has no share record")
            }
            containerIdentifier = info.containerIdentifier
            self.share = share
            hierarchicalRootRecordID = info.rootRecordName.map { CKRecord.ID(recordName: $0, zoneID: zoneID) }
            rootRecord = try info.rootRecord.map { root throws(CKError) in try WireRecordCoder.record(root, zoneID: zoneID, currentUser: currentUser) }
            ownerIdentity = CKUserIdentity(wire: info.ownerIdentity)
            participantRole = CKShare.ParticipantRole(wire: info.participantType)
            participantStatus = CKShare.ParticipantAcceptanceStatus(wire: info.participantStatus)
            participantPermission = CKShare.ParticipantPermission(wire: info.participantPermission)
            shortGUID = info.shortGUID
            self.info = info
        }
    }
}

extension CKContainerOperation {
    /// `records/resolve` or `records/accept` for short GUIDs: a result per GUID, in order.
    func shareInfos(_ entries: [ShortGUIDsRequest.Entry], accept: Bool) async throws(CKError) -> [ItemResult<ShareInfo>] {
        let path = accept ? "records/accept" : "records/resolve"
        let answer = try NimbusTransport.read(
            ShareInfosResponse.self,
            from: await transport.database(.public, path, ShortGUIDsRequest(shortGUIDs: entries).json, timeout: effectiveConfiguration.timeoutIntervalForRequest),
            endpoint: path)
        guard answer.results.count == entries.count else {
            throw CKError(.serverResponseLost, "\(path) answered \(answer.results.count) results for \(entries.count) short GUIDs")
        }
        return answer.results
    }

    /// The short GUID of a share URL (`…/share/<shortGUID>`, with or without a `#title`).
    static func shortGUID(of url: URL) -> String? {
        let last = url.lastPathComponent
        return last.isEmpty || last == "/" ? nil : last
    }
}

/// Looks up what share URLs lead to (`records/resolve`), before accepting.
open class CKFetchShareMetadataOperation: CKContainerOperation, @unchecked Sendable {
    public var shareURLs: [URL]?
    public var shouldFetchRootRecord = false
    public var rootRecordDesiredKeys: [CKRecord.FieldKey]?
    public var perShareMetadataResultBlock: (@Sendable (URL, Result<CKShare.Metadata, any Error>) -> Void)?
    public var fetchShareMetadataResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older blocks.
    public var perShareMetadataBlock: (@Sendable (URL, CKShare.Metadata?, (any Error)?) -> Void)?
    public var fetchShareMetadataCompletionBlock: (@Sendable ((any Error)?) -> Void)?
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(shareURLs: [URL]) {
        self.init()
        self.shareURLs = shareURLs
    }

    override func run() async throws {
        let urls = shareURLs ?? []
        var asked: [(URL, String)] = []
        for url in urls {
            guard let guid = Self.shortGUID(of: url) else {
                report(url, .failure(CKError(.invalidArguments, "\(url.absoluteString) is not a share URL")))
                continue
            }
            asked.append((url, guid))
        }
        guard !asked.isEmpty else {
            if !failures.isEmpty { throw CKError.partialFailure(failures, what: "share URLs") }
            return
        }
        let results = try await shareInfos(
            asked.map { ShortGUIDsRequest.Entry(value: $0.1, shouldFetchRootRecord: shouldFetchRootRecord, rootRecordDesiredKeys: rootRecordDesiredKeys) },
            accept: false)
        let me = transport.userRecordName
        for ((url, _), result) in zip(asked, results) {
            switch result {
            case .success(let info):
                do throws(CKError) {
                    let metadata = try CKShare.Metadata(info, currentUser: me)
                    // The zone's key of encrypted values, when the URL carries it (docs/encryption.md).
                    if let key = ShareURLKey.key(in: url), let me {
                        await journalContainer.keyMailbox.receiveZoneKey(key, zone: metadata.share.recordID.zoneID, user: me)
                    }
                    report(url, .success(metadata))
                } catch {
                    report(url, .failure(error))
                }
            case .failure(let error): report(url, .failure(CKError.fromServer(error)))
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "share URLs") }
    }

    private func report(_ url: URL, _ result: Result<CKShare.Metadata, any Error>) {
        if case .failure(let error) = result { failures[url] = error }
        perShareMetadataResultBlock?(url, result)
        perShareMetadataBlock?(url, try? result.get(), { if case .failure(let error) = result { return error } else { return nil } }())
    }

    override func finish(with error: CKError?) {
        fetchShareMetadataResultBlock?(error.map { .failure($0) } ?? .success(()))
        fetchShareMetadataCompletionBlock?(error)
    }
}

/// Accepts shares (`records/accept`): each one's zone then appears in the user's shared
/// database.
open class CKAcceptSharesOperation: CKContainerOperation, @unchecked Sendable {
    public var shareMetadatas: [CKShare.Metadata]?
    public var perShareResultBlock: (@Sendable (CKShare.Metadata, Result<CKShare, any Error>) -> Void)?
    public var acceptSharesResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older blocks.
    public var perShareCompletionBlock: (@Sendable (CKShare.Metadata, CKShare?, (any Error)?) -> Void)?
    public var acceptSharesCompletionBlock: (@Sendable ((any Error)?) -> Void)?
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(shareMetadatas: [CKShare.Metadata]) {
        self.init()
        self.shareMetadatas = shareMetadatas
    }

    override func run() async throws {
        let metadatas = shareMetadatas ?? []
        guard !metadatas.isEmpty else { return }
        let results = try await shareInfos(metadatas.map { ShortGUIDsRequest.Entry(value: $0.shortGUID) }, accept: true)
        let me = transport.userRecordName
        for (metadata, result) in zip(metadatas, results) {
            let outcome: Result<CKShare, any Error>
            switch result {
            case .success(let info):
                do throws(CKError) {
                    outcome = .success(try CKShare.Metadata(info, currentUser: me).share)
                } catch {
                    outcome = .failure(error)
                }
            case .failure(let error): outcome = .failure(CKError.fromServer(error))
            }
            if case .failure(let error) = outcome { failures[metadata.shortGUID] = error }
            perShareResultBlock?(metadata, outcome)
            perShareCompletionBlock?(metadata, try? outcome.get(), { if case .failure(let error) = outcome { return error } else { return nil } }())
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "shares to accept") }
    }

    override func finish(with error: CKError?) {
        acceptSharesResultBlock?(error.map { .failure($0) } ?? .success(()))
        acceptSharesCompletionBlock?(error)
    }
}

/// Makes participants to add to a share from lookup infos (email address, phone number or
/// user record ID). Nimbus matches them to users when the share is saved, so this asks the
/// server nothing: an address with no user yet becomes an invitation that is matched when
/// someone with it signs up and accepts.
open class CKFetchShareParticipantsOperation: CKContainerOperation, @unchecked Sendable {
    public var lookupInfos: [CKUserIdentity.LookupInfo]?
    public var perShareParticipantResultBlock: (@Sendable (CKUserIdentity.LookupInfo, Result<CKShare.Participant, any Error>) -> Void)?
    public var fetchShareParticipantsResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older blocks.
    public var shareParticipantFetchedBlock: (@Sendable (CKShare.Participant) -> Void)?
    public var fetchShareParticipantsCompletionBlock: (@Sendable ((any Error)?) -> Void)?

    public override init() { super.init() }

    public convenience init(userIdentityLookupInfos: [CKUserIdentity.LookupInfo]) {
        self.init()
        lookupInfos = userIdentityLookupInfos
    }

    /// Asks the server who each lookup names (`users/lookup/participants`, in requests of at
    /// most 200): a person with no account in the app is an error for that lookup
    /// (`unknownItem`), and the operation then ends in `partialFailure`.
    override func run() async throws {
        let infos = lookupInfos ?? []
        var failures: [AnyHashable: any Error] = [:]
        for chunk in chunked(infos, size: Limits.operationsPerRequest.value) {
            let path = "users/lookup/participants"
            let answer = try NimbusTransport.read(
                ParticipantLookupResponse.self,
                from: await transport.database(
                    .public, path, DiscoverUsersRequest(lookupInfos: chunk.map(\.wire)).json,
                    timeout: effectiveConfiguration.timeoutIntervalForRequest),
                endpoint: path)
            guard answer.users.count == chunk.count else {
                throw CKError(.serverResponseLost, "\(path) answered \(answer.users.count) entries for \(chunk.count) lookups")
            }
            for (info, entry) in zip(chunk, answer.users) {
                switch entry {
                case .success(let identity):
                    let participant = CKShare.Participant(
                        identity: CKUserIdentity(wire: identity), role: .privateUser, lookupInfo: identity.lookupInfo ?? info.wire)
                    perShareParticipantResultBlock?(info, .success(participant))
                    shareParticipantFetchedBlock?(participant)
                case .failure(let error):
                    let failure = CKError.fromServer(error)
                    failures[info] = failure
                    perShareParticipantResultBlock?(info, .failure(failure))
                }
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "share participants") }
    }

    override func finish(with error: CKError?) {
        fetchShareParticipantsResultBlock?(error.map { .failure($0) } ?? .success(()))
        fetchShareParticipantsCompletionBlock?(error)
    }
}

extension CKContainer {
    /// What a share URL leads to.
    public func shareMetadata(for url: URL, shouldFetchRootRecord: Bool = false) async throws -> CKShare.Metadata {
        let operation = CKFetchShareMetadataOperation(shareURLs: [url])
        operation.shouldFetchRootRecord = shouldFetchRootRecord
        let found = ShareResults<CKShare.Metadata>()
        operation.perShareMetadataResultBlock = { _, result in found.set(result) }
        try await runContainerOperation(operation) { operation.fetchShareMetadataResultBlock = $0 }
        return try found.get(what: url.absoluteString)
    }

    public func fetchShareMetadata(with url: URL, completionHandler: @escaping @Sendable (CKShare.Metadata?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.shareMetadata(for: url) }, to: completionHandler) }
    }

    /// Accepts a share: its zone appears in the user's shared database.
    @discardableResult
    public func accept(_ metadata: CKShare.Metadata) async throws -> CKShare {
        let operation = CKAcceptSharesOperation(shareMetadatas: [metadata])
        let accepted = ShareResults<CKShare>()
        operation.perShareResultBlock = { _, result in accepted.set(result) }
        try await runContainerOperation(operation) { operation.acceptSharesResultBlock = $0 }
        return try accepted.get(what: "the share")
    }

    public func accept(_ metadata: CKShare.Metadata, completionHandler: @escaping @Sendable (CKShare?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.accept(metadata) }, to: completionHandler) }
    }

    /// A participant to add to a share, for an email address; the server says who it is
    /// (`unknownItem` when nobody of the app has it).
    public func shareParticipant(forEmailAddress emailAddress: String) async throws -> CKShare.Participant {
        try await participant(CKUserIdentity.LookupInfo(emailAddress: emailAddress))
    }

    public func shareParticipant(forPhoneNumber phoneNumber: String) async throws -> CKShare.Participant {
        try await participant(CKUserIdentity.LookupInfo(phoneNumber: phoneNumber))
    }

    public func shareParticipant(forUserRecordID userRecordID: CKRecord.ID) async throws -> CKShare.Participant {
        try await participant(CKUserIdentity.LookupInfo(userRecordID: userRecordID))
    }

    private func participant(_ info: CKUserIdentity.LookupInfo) async throws -> CKShare.Participant {
        let operation = CKFetchShareParticipantsOperation(userIdentityLookupInfos: [info])
        let found = ShareResults<CKShare.Participant>()
        operation.perShareParticipantResultBlock = { _, result in found.set(result) }
        try await runContainerOperation(operation) { operation.fetchShareParticipantsResultBlock = $0 }
        return try found.get(what: "the share participant")
    }

    /// Runs a container operation and waits for its final result; a per-item failure reaches
    /// the caller through the item's own result.
    private func runContainerOperation(
        _ operation: CKContainerOperation, install: (@escaping @Sendable (Result<Void, any Error>) -> Void) -> Void
    ) async throws {
        operation.qualityOfService = .userInitiated
        do {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                install { continuation.resume(with: $0) }
                add(operation)
            }
        } catch let error as CKError where error.code == .partialFailure {
            return
        }
    }
}

/// One item's result, set from an operation's callback.
private final class ShareResults<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<Value, any Error>?

    func set(_ value: Result<Value, any Error>) { lock.withLock { result = value } }

    func get(what: String) throws -> Value {
        guard let result = lock.withLock({ result }) else { throw CKError(.internalError, "no result for \(what)") }
        return try result.get()
    }
}
