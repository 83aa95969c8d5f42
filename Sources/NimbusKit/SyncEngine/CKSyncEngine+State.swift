import Foundation

extension CKSyncEngine {
    /// What the engine knows: the changes the app asked it to send, and how far it has read
    /// the server's change feeds. Changes the app adds are written to the device's journal
    /// before `add` returns, so they survive a crash even if the app never got to keep the
    /// next `stateUpdate` (beyond CloudKit, whose engine can lose them).
    public final class State: @unchecked Sendable, CustomStringConvertible {
        private let lock = NSLock()
        private var stored: Stored
        /// How many times each pending change was added: a change added again while its
        /// request was in flight stays pending after that request succeeds.
        private var additions: [PendingRecordZoneChange: Int] = [:]
        private let journal: SyncEngineJournal?
        /// Called after each change of the pending lists (the engine schedules a send).
        var onPendingChange: (@Sendable () -> Void)?

        init(_ stored: Stored, journal: SyncEngineJournal?) {
            self.stored = stored
            self.journal = journal
        }

        public var pendingRecordZoneChanges: [PendingRecordZoneChange] { lock.withLock { stored.pendingRecordZoneChanges } }
        public var pendingDatabaseChanges: [PendingDatabaseChange] { lock.withLock { stored.pendingDatabaseChanges } }
        /// The app's flag for changes it has not yet added (CloudKit's): while set, a
        /// scheduled send asks the delegate for a batch even with nothing pending.
        public var hasPendingUntrackedChanges: Bool {
            get { lock.withLock { stored.hasPendingUntrackedChanges } }
            set { update { $0.hasPendingUntrackedChanges = newValue } }
        }
        /// Zones the server said changed that have not been fetched yet.
        public var zoneIDsWithUnfetchedServerChanges: [CKRecordZone.ID] {
            lock.withLock { stored.unfetchedZones.map(\.zoneID) }
        }

        public func add(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            update { stored in
                for change in changes {
                    additions[change, default: 0] += 1
                    // A save replaces a pending delete of the same record and the other way round.
                    stored.pendingRecordZoneChanges.removeAll { $0.recordID == change.recordID && $0 != change }
                    if !stored.pendingRecordZoneChanges.contains(change) { stored.pendingRecordZoneChanges.append(change) }
                }
            }
        }

        public func remove(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            update(notify: false) { stored in stored.pendingRecordZoneChanges.removeAll { changes.contains($0) } }
        }

        public func add(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            update { stored in
                for change in changes {
                    stored.pendingDatabaseChanges.removeAll { $0.zoneID == change.zoneID }
                    stored.pendingDatabaseChanges.append(change)
                }
            }
        }

        public func remove(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            update(notify: false) { stored in stored.pendingDatabaseChanges.removeAll { changes.contains($0) } }
        }

        public var description: String {
            lock.withLock {
                "<CKSyncEngine.State pendingRecordZoneChanges=\(stored.pendingRecordZoneChanges.count) pendingDatabaseChanges=\(stored.pendingDatabaseChanges.count) unfetchedZones=\(stored.unfetchedZones.count)>"
            }
        }

        // MARK: The engine's side

        /// Changes the pending lists and writes the journal before returning; tells the
        /// engine of additions (it schedules a send).
        private func update(notify: Bool = true, _ change: (inout Stored) -> Void) {
            lock.withLock {
                change(&stored)
                stored.revision += 1
                journal?.write(stored)
            }
            if notify { onPendingChange?() }
        }

        /// Changes what the engine tracks (tokens, account, sends in flight), journaled too.
        func track(_ change: (inout Stored) -> Void) {
            lock.withLock {
                change(&stored)
                stored.revision += 1
                journal?.write(stored)
            }
        }

        var snapshot: Stored { lock.withLock { stored } }

        /// How often `change` was added so far; compare after its request to see whether it
        /// was added again meanwhile.
        func additionCount(_ change: PendingRecordZoneChange) -> Int { lock.withLock { additions[change] ?? 0 } }

        /// Removes changes that were sent, unless added again after `counts` were taken.
        func removeSent(_ counts: [PendingRecordZoneChange: Int]) {
            update(notify: false) { stored in
                let done = Set(counts.filter { additions[$0.key, default: 0] == $0.value }.keys)
                stored.pendingRecordZoneChanges.removeAll { done.contains($0) }
            }
        }

        var serialization: Serialization { Serialization(stored: snapshot) }

        /// What is kept: in the serialization the app stores and in the device's journal.
        struct Stored: Codable, Sendable {
            static let currentVersion = 1
            var version = Stored.currentVersion
            var containerIdentifier: String
            var databaseScope: String
            /// Which history this state belongs to: a journal continues a serialization only
            /// when both come from the same engine's history.
            var lineage = UUID().uuidString
            /// Grows with every change: of a serialization and a journal of one lineage, the
            /// newer wins.
            var revision = 0
            var userRecordName: String?
            var databaseToken: String?
            var zoneTokens: [String: String] = [:]
            var unfetchedZones: [ZoneName] = []
            var pendingRecordZoneChanges: [PendingRecordZoneChange] = []
            var pendingDatabaseChanges: [PendingDatabaseChange] = []
            var hasPendingUntrackedChanges = false
            var subscriptionID: String?
            /// Long-lived modify operations sent and not yet answered; resumed first.
            var sendsInFlight: [String] = []
        }

        /// Opaque to the app: keep the newest from `stateUpdate` and pass it to the next engine.
        public struct Serialization: Codable, Sendable, CustomStringConvertible {
            let stored: Stored

            init(stored: Stored) { self.stored = stored }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                let stored: Stored
                do {
                    stored = try container.decode(Stored.self)
                } catch {
                    throw DecodingError.dataCorrupted(
                        .init(
                            codingPath: decoder.codingPath,
                            debugDescription: "not a CKSyncEngine state serialization (garbled or from another program): \(error)"
                        ))
                }
                guard stored.version <= Stored.currentVersion else {
                    throw DecodingError.dataCorrupted(
                        .init(
                            codingPath: decoder.codingPath,
                            debugDescription: "a CKSyncEngine state serialization of version \(stored.version), newer than this NimbusKit reads (\(Stored.currentVersion))"))
                }
                self.stored = stored
            }

            public func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                try container.encode(stored)
            }

            public var description: String {
                "<CKSyncEngine.State.Serialization \(stored.containerIdentifier)/\(stored.databaseScope) revision \(stored.revision)>"
            }
        }
    }
}

/// A zone's name and owner, as the state keeps them.
struct ZoneName: Codable, Hashable, Sendable {
    var zoneName: String
    var ownerName: String

    init(_ id: CKRecordZone.ID) {
        zoneName = id.zoneName
        ownerName = id.ownerName
    }

    var zoneID: CKRecordZone.ID { CKRecordZone.ID(zoneName: zoneName, ownerName: ownerName) }
    var key: String { "\(ownerName)/\(zoneName)" }
}

extension CKSyncEngine.PendingRecordZoneChange: Codable {
    private enum Keys: String, CodingKey { case kind, recordName, zoneName, ownerName }

    public init(from decoder: any Decoder) throws {
        let values = try decoder.container(keyedBy: Keys.self)
        let id = CKRecord.ID(
            recordName: try values.decode(String.self, forKey: .recordName),
            zoneID: CKRecordZone.ID(
                zoneName: try values.decode(String.self, forKey: .zoneName), ownerName: try values.decode(String.self, forKey: .ownerName)))
        switch try values.decode(String.self, forKey: .kind) {
        case "save": self = .saveRecord(id)
        case "delete": self = .deleteRecord(id)
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .kind, in: values, debugDescription: "unknown pending change '\(other)'")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var values = encoder.container(keyedBy: Keys.self)
        if case .saveRecord = self { try values.encode("save", forKey: .kind) } else { try values.encode("delete", forKey: .kind) }
        try values.encode(recordID.recordName, forKey: .recordName)
        try values.encode(recordID.zoneID.zoneName, forKey: .zoneName)
        try values.encode(recordID.zoneID.ownerName, forKey: .ownerName)
    }
}

extension CKSyncEngine.PendingDatabaseChange: Codable {
    private enum Keys: String, CodingKey { case kind, zoneName, ownerName }

    public init(from decoder: any Decoder) throws {
        let values = try decoder.container(keyedBy: Keys.self)
        let id = CKRecordZone.ID(
            zoneName: try values.decode(String.self, forKey: .zoneName), ownerName: try values.decode(String.self, forKey: .ownerName))
        switch try values.decode(String.self, forKey: .kind) {
        case "save": self = .saveZone(CKRecordZone(zoneID: id))
        case "delete": self = .deleteZone(id)
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .kind, in: values, debugDescription: "unknown pending change '\(other)'")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var values = encoder.container(keyedBy: Keys.self)
        if case .saveZone = self { try values.encode("save", forKey: .kind) } else { try values.encode("delete", forKey: .kind) }
        try values.encode(zoneID.zoneName, forKey: .zoneName)
        try values.encode(zoneID.ownerName, forKey: .ownerName)
    }
}

/// The device's copy of the engine's state, rewritten (atomically) at every change: what
/// carries pending changes across a crash the app's own copy of the state did not see.
/// One file per container, database and device folder (beside the long-lived operations).
struct SyncEngineJournal: Sendable {
    let file: URL

    init(directory: URL, scope: CKDatabase.Scope) {
        file = directory.appendingPathComponent("sync-engine-\(scope.name).state")
    }

    func write(_ stored: CKSyncEngine.State.Stored) {
        do {
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try JSONEncoder().encode(stored).write(to: file, options: .atomic)
        } catch {
            // The app's serialization still carries the state; only crash safety is lost.
            CKSyncEngine.logger.warning("could not write the sync engine's journal \(file.path): \(error)")
        }
    }

    func read() -> CKSyncEngine.State.Stored? {
        guard let data = FileManager.default.contents(atPath: file.path) else { return nil }
        do {
            return try JSONDecoder().decode(CKSyncEngine.State.Stored.self, from: data)
        } catch {
            CKSyncEngine.logger.warning("the sync engine's journal \(file.path) does not read (\(error)); starting from the app's state")
            return nil
        }
    }
}

extension CKDatabase.Scope {
    var name: String {
        switch self {
        case .public: "public"
        case .private: "private"
        case .shared: "shared"
        }
    }
}
