/// What the share records cannot answer by themselves (docs/sharing.md), in the coarse, async
/// form of the storage protocol (see `AccountStore`): which share a short GUID names, and
/// which shares each user was invited to or accepted. Both are written so that a crash leaves
/// them a superset of the truth (before the save that makes an entry true, after the save
/// that makes one false), and every reader checks the share record itself.
public protocol ShareStore: Sendable {
    /// Registers a short GUID for a share about to be saved; false when it is taken.
    func registerShortGUID(_ shortGUID: String, for share: ShareLocation) async throws -> Bool
    func shareLocation(shortGUID: String) async throws -> ShareLocation?
    func forgetShortGUIDs(_ shortGUIDs: [String]) async throws
    /// Notes that a user (by record name) may take part in a share.
    func addMember(_ userRecordName: String, to share: ShareLocation) async throws
    func removeMember(_ userRecordName: String, from share: ShareLocation) async throws
    /// The shares a user may take part in, in a container's environment.
    func shares(ofMember userRecordName: String, container: String, environment: Environment) async throws -> [ShareLocation]
}

/// Where a share record is: the owner's private database (by owner), zone and record name.
public struct ShareLocation: Sendable, Hashable {
    public var container: String
    public var environment: Environment
    public var ownerID: Int64
    /// The owner's user record name: shared zone IDs carry it.
    public var ownerRecordName: String
    public var zoneName: String
    public var recordName: String

    public init(
        container: String, environment: Environment, ownerID: Int64, ownerRecordName: String, zoneName: String, recordName: String
    ) {
        self.container = container
        self.environment = environment
        self.ownerID = ownerID
        self.ownerRecordName = ownerRecordName
        self.zoneName = zoneName
        self.recordName = recordName
    }

    /// The owner's private database.
    public var databaseKey: DatabaseKey {
        DatabaseKey(container: container, environment: environment, scope: .private, ownerID: ownerID)
    }
}
