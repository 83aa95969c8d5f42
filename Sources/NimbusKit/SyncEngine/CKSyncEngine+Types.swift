import Foundation

// The value types of CKSyncEngine's API, as Apple declares them (iOS 17): configuration,
// pending changes, batches, options and contexts. The engine is in CKSyncEngine.swift, its
// state in CKSyncEngine+State.swift, its events in CKSyncEngine+Event.swift.

/// What the app gives the engine: the records to send and the handling of what happened.
public protocol CKSyncEngineDelegate: AnyObject, Sendable {
    /// Every event, one at a time, in order. Persist `stateUpdate`'s serialization.
    func handleEvent(_ event: CKSyncEngine.Event, syncEngine: CKSyncEngine) async
    /// The next records to send, usually built with `RecordZoneChangeBatch(pendingChanges:recordProvider:)`
    /// from `syncEngine.state.pendingRecordZoneChanges` filtered by `context.options.scope`;
    /// nil when there is nothing more.
    func nextRecordZoneChangeBatch(_ context: CKSyncEngine.SendChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.RecordZoneChangeBatch?
    /// The options of a fetch about to start; by default the context's.
    func nextFetchChangesOptions(_ context: CKSyncEngine.FetchChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.FetchChangesOptions
}

extension CKSyncEngineDelegate {
    public func nextFetchChangesOptions(_ context: CKSyncEngine.FetchChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.FetchChangesOptions
    { context.options }
}

extension CKSyncEngine {
    public struct Configuration: @unchecked Sendable, CustomStringConvertible {
        /// The private or shared database of the signed-in user.
        public var database: CKDatabase
        /// The last `stateUpdate` the app kept; nil on first launch.
        public var stateSerialization: State.Serialization?
        /// Held weakly by the engine, as CloudKit's.
        public var delegate: any CKSyncEngineDelegate
        /// Fetch when the server says something changed and send soon after changes are added;
        /// off: only `fetchChanges()` and `sendChanges()` talk to the server.
        public var automaticallySync: Bool = true
        /// The database subscription to listen on; nil: the engine finds or creates its own.
        public var subscriptionID: CKSubscription.ID?

        public init(database: CKDatabase, stateSerialization: State.Serialization?, delegate: any CKSyncEngineDelegate) {
            self.database = database
            self.stateSerialization = stateSerialization
            self.delegate = delegate
        }

        public var description: String {
            "<CKSyncEngine.Configuration database=\(database.databaseScope) automaticallySync=\(automaticallySync) subscriptionID=\(subscriptionID ?? "nil")>"
        }
    }

    /// A record the app changed and the engine is to send.
    public enum PendingRecordZoneChange: Hashable, Sendable, CustomStringConvertible {
        case saveRecord(CKRecord.ID)
        case deleteRecord(CKRecord.ID)

        var recordID: CKRecord.ID {
            switch self {
            case .saveRecord(let id), .deleteRecord(let id): id
            }
        }

        public var description: String {
            switch self {
            case .saveRecord(let id): "saveRecord(\(id.recordName) in \(id.zoneID.zoneName))"
            case .deleteRecord(let id): "deleteRecord(\(id.recordName) in \(id.zoneID.zoneName))"
            }
        }
    }

    /// A zone the app created or deleted and the engine is to send.
    public enum PendingDatabaseChange: Hashable, Sendable, CustomStringConvertible {
        case saveZone(CKRecordZone)
        case deleteZone(CKRecordZone.ID)

        public var zoneID: CKRecordZone.ID {
            switch self {
            case .saveZone(let zone): zone.zoneID
            case .deleteZone(let id): id
            }
        }

        // One pending change per zone and kind: a zone saved twice is one save.
        public static func == (lhs: Self, rhs: Self) -> Bool {
            switch (lhs, rhs) {
            case (.saveZone(let a), .saveZone(let b)): a.zoneID == b.zoneID
            case (.deleteZone(let a), .deleteZone(let b)): a == b
            default: false
            }
        }

        public func hash(into hasher: inout Hasher) {
            if case .saveZone = self { hasher.combine(0) } else { hasher.combine(1) }
            hasher.combine(zoneID)
        }

        public var description: String {
            switch self {
            case .saveZone(let zone): "saveZone(\(zone.zoneID.zoneName))"
            case .deleteZone(let id): "deleteZone(\(id.zoneName))"
            }
        }
    }

    /// What one `nextRecordZoneChangeBatch` hands the engine. The engine splits a batch over
    /// the server's request limits into several requests; it never refuses one.
    public struct RecordZoneChangeBatch: @unchecked Sendable, CustomStringConvertible {
        public var recordsToSave: [CKRecord]
        public var recordIDsToDelete: [CKRecord.ID]
        /// Saves and deletes in one zone succeed or fail together (per request of at most
        /// `CKSyncEngine.recordsPerRequest`).
        public var atomicByZone: Bool

        public init(recordsToSave: [CKRecord] = [], recordIDsToDelete: [CKRecord.ID] = [], atomicByZone: Bool = false) {
            self.recordsToSave = recordsToSave
            self.recordIDsToDelete = recordIDsToDelete
            self.atomicByZone = atomicByZone
        }

        /// A batch of up to one request's worth of `pendingChanges`, asking `recordProvider` for
        /// each record to save; one it has no record for is left out. Nil when nothing is left.
        public init?(
            pendingChanges: [PendingRecordZoneChange], recordProvider: (CKRecord.ID) async -> CKRecord?
        ) async {
            var saves: [CKRecord] = []
            var deletes: [CKRecord.ID] = []
            for change in pendingChanges {
                if saves.count + deletes.count >= CKSyncEngine.recordsPerRequest { break }
                switch change {
                case .saveRecord(let id):
                    if let record = await recordProvider(id) { saves.append(record) }
                case .deleteRecord(let id):
                    deletes.append(id)
                }
            }
            if saves.isEmpty, deletes.isEmpty { return nil }
            self.init(recordsToSave: saves, recordIDsToDelete: deletes)
        }

        public var description: String {
            "<RecordZoneChangeBatch saves=\(recordsToSave.count) deletes=\(recordIDsToDelete.count) atomicByZone=\(atomicByZone)>"
        }
    }

    /// Why the engine fetches or sends: on its own, or because the app called it.
    public enum SyncReason: Sendable, CustomStringConvertible {
        case scheduled
        case manual

        public var description: String { self == .scheduled ? "scheduled" : "manual" }
    }

    public struct FetchChangesOptions: @unchecked Sendable, CustomStringConvertible {
        public enum Scope: Hashable, Sendable {
            case all
            case zoneIDs([CKRecordZone.ID])
            case allExcluding([CKRecordZone.ID])

            public func contains(_ zoneID: CKRecordZone.ID) -> Bool {
                switch self {
                case .all: true
                case .zoneIDs(let ids): ids.contains(zoneID)
                case .allExcluding(let ids): !ids.contains(zoneID)
                }
            }
        }

        public var scope: Scope
        public var operationGroup: CKOperationGroup?
        /// Zones fetched before the others.
        public var prioritizedZoneIDs: [CKRecordZone.ID] = []

        public init(scope: Scope = .all) { self.scope = scope }

        public var description: String { "<FetchChangesOptions scope=\(scope)>" }
    }

    public struct SendChangesOptions: @unchecked Sendable, CustomStringConvertible {
        public enum Scope: Hashable, Sendable {
            case all
            case zoneIDs([CKRecordZone.ID])
            case allExcluding([CKRecordZone.ID])
            case recordIDs([CKRecord.ID])

            public func contains(_ zoneID: CKRecordZone.ID) -> Bool {
                switch self {
                case .all: true
                case .zoneIDs(let ids): ids.contains(zoneID)
                case .allExcluding(let ids): !ids.contains(zoneID)
                case .recordIDs(let ids): ids.contains { $0.zoneID == zoneID }
                }
            }

            public func contains(_ recordID: CKRecord.ID) -> Bool {
                if case .recordIDs(let ids) = self { return ids.contains(recordID) }
                return contains(recordID.zoneID)
            }

            public func contains(_ pendingChange: PendingRecordZoneChange) -> Bool { contains(pendingChange.recordID) }

            public func contains(_ pendingChange: PendingDatabaseChange) -> Bool { contains(pendingChange.zoneID) }
        }

        public var scope: Scope
        public var operationGroup: CKOperationGroup?

        public init(scope: Scope = .all) { self.scope = scope }

        public var description: String { "<SendChangesOptions scope=\(scope)>" }
    }

    public struct FetchChangesContext: Sendable, CustomStringConvertible {
        public let reason: SyncReason
        public let options: FetchChangesOptions

        public var description: String { "<FetchChangesContext reason=\(reason) \(options)>" }
    }

    public struct SendChangesContext: Sendable, CustomStringConvertible {
        public let reason: SyncReason
        public let options: SendChangesOptions

        public var description: String { "<SendChangesContext reason=\(reason) \(options)>" }
    }
}
