import Foundation

extension CKSyncEngine {
    /// What the engine tells its delegate, one at a time and in order.
    public enum Event: @unchecked Sendable, CustomStringConvertible {
        /// The state changed: keep `stateSerialization` and hand it to the next engine.
        case stateUpdate(StateUpdate)
        case accountChange(AccountChange)
        case fetchedDatabaseChanges(FetchedDatabaseChanges)
        case fetchedRecordZoneChanges(FetchedRecordZoneChanges)
        case sentDatabaseChanges(SentDatabaseChanges)
        case sentRecordZoneChanges(SentRecordZoneChanges)
        case willFetchChanges(WillFetchChanges)
        case willFetchRecordZoneChanges(WillFetchRecordZoneChanges)
        case didFetchRecordZoneChanges(DidFetchRecordZoneChanges)
        case didFetchChanges(DidFetchChanges)
        case willSendChanges(WillSendChanges)
        case didSendChanges(DidSendChanges)

        public var description: String {
            switch self {
            case .stateUpdate: "stateUpdate"
            case .accountChange(let e): "accountChange(\(e.changeType))"
            case .fetchedDatabaseChanges(let e):
                "fetchedDatabaseChanges(modifications: \(e.modifications.count), deletions: \(e.deletions.count))"
            case .fetchedRecordZoneChanges(let e):
                "fetchedRecordZoneChanges(modifications: \(e.modifications.count), deletions: \(e.deletions.count))"
            case .sentDatabaseChanges(let e):
                "sentDatabaseChanges(saved: \(e.savedZones.count), failed: \(e.failedZoneSaves.count + e.failedZoneDeletes.count), deleted: \(e.deletedZoneIDs.count))"
            case .sentRecordZoneChanges(let e):
                "sentRecordZoneChanges(saved: \(e.savedRecords.count), failed: \(e.failedRecordSaves.count + e.failedRecordDeletes.count), deleted: \(e.deletedRecordIDs.count))"
            case .willFetchChanges: "willFetchChanges"
            case .willFetchRecordZoneChanges(let e): "willFetchRecordZoneChanges(\(e.zoneID.zoneName))"
            case .didFetchRecordZoneChanges(let e): "didFetchRecordZoneChanges(\(e.zoneID.zoneName), error: \(e.error.map { "\($0.code)" } ?? "nil"))"
            case .didFetchChanges: "didFetchChanges"
            case .willSendChanges: "willSendChanges"
            case .didSendChanges: "didSendChanges"
            }
        }

        public struct StateUpdate: Sendable {
            public let stateSerialization: State.Serialization
        }

        public struct AccountChange: Sendable {
            public enum ChangeType: Sendable, CustomStringConvertible {
                case signIn(currentUser: CKRecord.ID)
                case signOut(previousUser: CKRecord.ID)
                case switchAccounts(previousUser: CKRecord.ID, currentUser: CKRecord.ID)

                public var description: String {
                    switch self {
                    case .signIn(let user): "signIn(\(user.recordName))"
                    case .signOut(let user): "signOut(\(user.recordName))"
                    case .switchAccounts(let previous, let current): "switchAccounts(\(previous.recordName) → \(current.recordName))"
                    }
                }
            }

            public let changeType: ChangeType
        }

        public struct FetchedDatabaseChanges: Sendable {
            public let modifications: [CKDatabase.DatabaseChange.Modification]
            public let deletions: [CKDatabase.DatabaseChange.Deletion]
        }

        public struct FetchedRecordZoneChanges: Sendable {
            public let modifications: [CKDatabase.RecordZoneChange.Modification]
            public let deletions: [CKDatabase.RecordZoneChange.Deletion]
        }

        public struct SentDatabaseChanges: @unchecked Sendable {
            public struct FailedZoneSave: @unchecked Sendable {
                public let zone: CKRecordZone
                public let error: CKError
            }

            public let savedZones: [CKRecordZone]
            public let failedZoneSaves: [FailedZoneSave]
            public let deletedZoneIDs: [CKRecordZone.ID]
            public let failedZoneDeletes: [CKRecordZone.ID: CKError]
        }

        /// What one request of a send did. A failed save's error is the record's own:
        /// `serverRecordChanged` carries the server's record to merge with, then add the
        /// change again; `zoneNotFound` asks for the zone to be saved first.
        public struct SentRecordZoneChanges: @unchecked Sendable {
            public struct FailedRecordSave: @unchecked Sendable {
                public let record: CKRecord
                public let error: CKError
            }

            public let savedRecords: [CKRecord]
            public let failedRecordSaves: [FailedRecordSave]
            public let deletedRecordIDs: [CKRecord.ID]
            public let failedRecordDeletes: [CKRecord.ID: CKError]
        }

        public struct WillFetchChanges: Sendable {
            public let context: FetchChangesContext
        }

        public struct WillFetchRecordZoneChanges: Sendable {
            public let zoneID: CKRecordZone.ID
        }

        public struct DidFetchRecordZoneChanges: Sendable {
            public let zoneID: CKRecordZone.ID
            public let error: CKError?
        }

        public struct DidFetchChanges: Sendable {
            public let context: FetchChangesContext
        }

        public struct WillSendChanges: Sendable {
            public let context: SendChangesContext
        }

        public struct DidSendChanges: Sendable {
            public let context: SendChangesContext
        }
    }
}
