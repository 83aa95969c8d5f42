import Foundation
import NimbusWire

/// A share (docs/sharing.md): a record of type `cloudkit.share` in a custom zone of its
/// owner's private database that lets the people it names see its root record's hierarchy,
/// or with `init(recordZoneID:)` the whole zone. Saved with `CKModifyRecordsOperation` (with
/// its root, for a new hierarchy share) or `database.save`.
public final class CKShare: CKRecord, @unchecked Sendable {
    public enum ParticipantRole: Int, Sendable {
        case unknown = 0
        case owner = 1
        case privateUser = 3
        case publicUser = 4
        case administrator = 2
    }

    public enum ParticipantPermission: Int, Sendable {
        case unknown = 0
        case none = 1
        case readOnly = 2
        case readWrite = 3
    }

    public enum ParticipantAcceptanceStatus: Int, Sendable {
        case unknown = 0
        case pending = 1
        case accepted = 2
        case removed = 3
    }

    /// The share's own fields, beside the app's.
    public enum SystemFieldKey {
        public static let title: CKRecord.FieldKey = "cloudkit.title"
        public static let thumbnailImageData: CKRecord.FieldKey = "cloudkit.thumbnailImageData"
        public static let shareType: CKRecord.FieldKey = "cloudkit.type"
    }

    private let shareLock = NSLock()
    private var _participants: [Participant] = []
    private var _publicPermission: ParticipantPermission = .none
    private var _url: URL?
    private var _currentUserParticipant: Participant?
    /// The root of a hierarchy share not saved yet: sent as `forRecord`.
    let rootRecordID: CKRecord.ID?
    /// Keys of the share's record the server keeps that NimbusKit does not read.
    var otherKeys: JSONObject = [:]

    /// A share of `rootRecord`'s hierarchy, in its zone; save it in the same operation as the root.
    public convenience init(rootRecord: CKRecord) {
        self.init(rootRecord: rootRecord, shareID: CKRecord.ID(recordName: UUID().uuidString, zoneID: rootRecord.recordID.zoneID))
    }

    public init(rootRecord: CKRecord, shareID: CKRecord.ID) {
        rootRecordID = rootRecord.recordID
        super.init(recordType: Names.shareRecordType, recordID: shareID)
    }

    /// A share of a whole custom zone (named `cloudkit.zoneshare`, as CloudKit names it).
    public init(recordZoneID: CKRecordZone.ID) {
        rootRecordID = nil
        super.init(recordType: Names.shareRecordType, recordID: CKRecord.ID(recordName: Names.zoneWideShareName, zoneID: recordZoneID))
    }

    /// A share as the server sent it.
    init(recordID: CKRecord.ID, facts: ShareFacts?, currentUser: String?) {
        rootRecordID = nil
        super.init(recordType: Names.shareRecordType, recordID: recordID)
        if let facts { apply(facts, currentUser: currentUser) }
    }

    public required init?(coder: NSCoder) {
        rootRecordID = coder.decodeIfPresent(CKRecord.ID.self, forKey: "rootRecordID")
        super.init(coder: coder)
        // The share's people, permission and URL, as archived (JSON in the wire's shape).
        if let text = coder.decodeIfPresent(NSString.self, forKey: "ckShareState"), case .object(let object)? = try? JSON.parse(Array(String(text).utf8)),
            let facts = try? ShareFacts(json: ObjectReader(object, path: "ckShareState"))
        {
            let me = coder.decodeIfPresent(NSString.self, forKey: "ckShareCurrentUser").map(String.init)
            apply(facts, currentUser: me)
        }
    }

    /// The system fields with the share's own: its root, people, permission and URL, so an
    /// archived share comes back whole (an app keeps it to save changes without a fetch).
    public override func encodeSystemFields(with coder: NSCoder) {
        super.encodeSystemFields(with: coder)
        if let rootRecordID { coder.encode(rootRecordID, forKey: "rootRecordID") }
        let (participants, permission, url, current) = shareLock.withLock { (_participants, _publicPermission, _url, _currentUserParticipant) }
        var state = JSONWriter()
        state.openObject()
        ShareFacts(
            shortGUID: url?.lastPathComponent ?? "", publicPermission: permission.wire, participants: participants.map(\.archived),
            owner: nil, currentUserParticipant: nil, webpageURL: url?.absoluteString, displayedHostname: nil, otherKeys: otherKeys
        ).write(to: &state, besides: { _ in false })
        state.closeObject()
        coder.encode(String(decoding: state.bytes, as: UTF8.self) as NSString, forKey: "ckShareState")
        if let name = current?.userIdentity.userRecordID?.recordName { coder.encode(name as NSString, forKey: "ckShareCurrentUser") }
    }

    func apply(_ facts: ShareFacts, currentUser: String?) {
        let participants = facts.participants.map { Participant(wire: $0, currentUser: currentUser) }
        shareLock.withLock {
            _participants = participants
            _publicPermission = ParticipantPermission(wire: facts.publicPermission)
            _url = facts.webpageURL.flatMap(URL.init(string:))
            _currentUserParticipant = participants.first { $0.isCurrentUser }
        }
        otherKeys = facts.otherKeys
    }

    /// Everyone the caller may see take part: the owner and administrators see all; anyone
    /// else the owner and themselves.
    public var participants: [Participant] { shareLock.withLock { _participants } }

    public var owner: Participant {
        shareLock.withLock { _participants.first { $0.role == .owner } }
            ?? Participant(identity: CKUserIdentity(wire: UserIdentity()), role: .owner)
    }

    public var currentUserParticipant: Participant? { shareLock.withLock { _currentUserParticipant } }

    /// Anyone with the URL may join with this permission; `.none` (the default) keeps the share
    /// to the people invited, and setting it back removes those who joined by the URL.
    public var publicPermission: ParticipantPermission {
        get { shareLock.withLock { _publicPermission } }
        set { shareLock.withLock { _publicPermission = newValue } }
    }

    /// The share's page on the server, once saved. For its owner, with the key of the zone's
    /// encrypted values in its fragment (`#nk=…`, docs/encryption.md), which is never sent to a
    /// server: whoever is handed the URL reads them once the share lets them in.
    public var url: URL? { shareLock.withLock { _url } }

    /// Puts a zone's key in the URL's fragment.
    func carryZoneKey(_ key: Data) {
        shareLock.withLock { _url = _url.map { ShareURLKey.url($0, carrying: key) } }
    }

    public func addParticipant(_ participant: Participant) {
        shareLock.withLock {
            if !_participants.contains(where: { $0 === participant || ($0.participantID == participant.participantID && !$0.participantID.isEmpty) }) {
                _participants.append(participant)
            }
        }
    }

    public func removeParticipant(_ participant: Participant) {
        shareLock.withLock { _participants.removeAll { $0 === participant || (!$0.participantID.isEmpty && $0.participantID == participant.participantID) } }
    }

    public override func copy(with zone: NSZone? = nil) -> Any {
        let copy = CKShare(recordID: recordID, facts: nil, currentUser: nil)
        for key in allKeys() { copy.setObject(object(forKey: key), forKey: key) }
        copy.copySystemFields(from: self)
        shareLock.withLock {
            copy._participants = _participants
            copy._publicPermission = _publicPermission
            copy._url = _url
            copy._currentUserParticipant = _currentUserParticipant
        }
        copy.otherKeys = otherKeys
        return copy
    }

    public override var description: String {
        "<CKShare: \(recordID.recordName); participants=\(participants.count); publicPermission=\(publicPermission)>"
    }

    /// The share's keys of a save.
    var wireParticipants: [ShareParticipant] { participants.map(\.wire) }
}

extension CKShare.ParticipantPermission {
    init(wire: SharePermission) {
        switch wire {
        case .none: self = .none
        case .readOnly: self = .readOnly
        case .readWrite: self = .readWrite
        case .unknown: self = .unknown
        }
    }

    var wire: SharePermission {
        switch self {
        case .none: .none
        case .readOnly: .readOnly
        case .readWrite: .readWrite
        case .unknown: .unknown
        }
    }
}

extension CKShare {
    /// Someone taking part in a share. Made by `CKFetchShareParticipantsOperation` (or the
    /// container's `shareParticipant(for…)`) for an invitation, and by the server for everyone
    /// already on a share.
    public final class Participant: NSObject, @unchecked Sendable {
        private let lock = NSLock()
        private var _permission: ParticipantPermission
        private var _role: ParticipantRole
        public let userIdentity: CKUserIdentity
        public let acceptanceStatus: ParticipantAcceptanceStatus
        /// The server's id of the participant; empty until the share is saved.
        public let participantID: String
        let isCurrentUser: Bool
        private let lookupInfo: UserLookupInfo?
        private let otherKeys: JSONObject

        public var permission: ParticipantPermission {
            get { lock.withLock { _permission } }
            set { lock.withLock { _permission = newValue } }
        }

        public var role: ParticipantRole {
            get { lock.withLock { _role } }
            set { lock.withLock { _role = newValue } }
        }

        init(identity: CKUserIdentity, role: ParticipantRole, lookupInfo: UserLookupInfo? = nil) {
            userIdentity = identity
            _role = role
            _permission = .readOnly
            acceptanceStatus = .pending
            participantID = ""
            isCurrentUser = false
            self.lookupInfo = lookupInfo
            otherKeys = [:]
        }

        init(wire: ShareParticipant, currentUser: String?) {
            let name = wire.userIdentity.userRecordName
            userIdentity = CKUserIdentity(wire: wire.userIdentity)
            _role = ParticipantRole(wire: wire.type ?? .user)
            _permission = ParticipantPermission(wire: wire.permission ?? .readOnly)
            acceptanceStatus = ParticipantAcceptanceStatus(wire: wire.acceptanceStatus ?? .unknown)
            participantID = wire.participantId ?? ""
            isCurrentUser = name != nil && name == currentUser
            lookupInfo = wire.userIdentity.lookupInfo
            otherKeys = wire.otherKeys
        }

        /// The participant as an archive keeps it: everything the server said.
        var archived: ShareParticipant {
            var identity = UserIdentity(lookupInfo: lookupInfo)
            identity.userRecordName = userIdentity.userRecordID?.recordName
            identity.nameComponents = userIdentity.nameComponents.map(NameComponents.init(components:))
            return ShareParticipant(
                participantId: participantID.isEmpty ? nil : participantID, userIdentity: identity, type: role.wire,
                permission: permission.wire, acceptanceStatus: acceptanceStatus.wire, otherKeys: otherKeys)
        }

        /// The participant as a save sends it.
        var wire: ShareParticipant {
            var identity = UserIdentity(lookupInfo: lookupInfo)
            if let name = userIdentity.userRecordID?.recordName, name != CKCurrentUserDefaultName { identity.userRecordName = name }
            return ShareParticipant(
                participantId: participantID.isEmpty ? nil : participantID, userIdentity: identity, type: role.wire,
                permission: permission.wire, acceptanceStatus: nil, otherKeys: otherKeys)
        }

        public override var description: String {
            "<CKShare.Participant: \(role) \(permission) \(acceptanceStatus) \(userIdentity.userRecordID?.recordName ?? "")>"
        }
    }
}

extension CKShare.ParticipantRole {
    init(wire: ParticipantType) {
        switch wire {
        case .owner: self = .owner
        case .administrator: self = .administrator
        case .user: self = .privateUser
        case .publicUser: self = .publicUser
        case .unknown: self = .unknown
        }
    }

    var wire: ParticipantType {
        switch self {
        case .owner: .owner
        case .administrator: .administrator
        case .privateUser: .user
        case .publicUser: .publicUser
        case .unknown: .unknown
        }
    }
}

extension NameComponents {
    init(components: PersonNameComponents) {
        self.init(
            namePrefix: components.namePrefix, givenName: components.givenName, middleName: components.middleName,
            familyName: components.familyName, nameSuffix: components.nameSuffix, nickname: components.nickname)
    }
}

extension CKShare.ParticipantAcceptanceStatus {
    var wire: AcceptanceStatus {
        switch self {
        case .pending: .invited
        case .accepted: .accepted
        case .removed: .removed
        case .unknown: .unknown
        }
    }

    init(wire: AcceptanceStatus) {
        switch wire {
        case .invited: self = .pending
        case .accepted: self = .accepted
        case .removed: self = .removed
        case .unknown: self = .unknown
        }
    }
}
