import Foundation

extension CKSyncEngine {
    /// What the engine knows: the changes the app asked it to send, and how far it has read
    /// the server's change feeds. As with CloudKit, the engine's state is what the app keeps
    /// from `stateUpdate` events (one follows every change the app makes here) and nothing
    /// else, so several engines in one process are several devices. Beyond CloudKit, changes
    /// the app adds are also written to a journal of this state's own history before `add`
    /// returns: a crash before the app kept the next `stateUpdate` loses nothing.
    public final class State: @unchecked Sendable, CustomStringConvertible {
        private let lock = NSLock()
        private var stored: Stored
        /// How many times each pending change was added: a change added again while its
        /// request was in flight stays pending after that request succeeds.
        private var additions: [PendingRecordZoneChange: Int] = [:]
        private let journal: SyncEngineJournal?
        /// Called after each change the app makes (the engine schedules a `stateUpdate`, and a
        /// send when changes were added).
        var onAppChange: (@Sendable (_ added: Bool) -> Void)?

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
            set { update(added: newValue) { $0.hasPendingUntrackedChanges = newValue } }
        }
        /// Zones the server said changed that have not been fetched yet.
        public var zoneIDsWithUnfetchedServerChanges: [CKRecordZone.ID] {
            lock.withLock { stored.unfetchedZones.map(\.zoneID) }
        }

        public func add(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            update(added: true) { stored in
                for change in changes {
                    additions[change, default: 0] += 1
                    // A save replaces a pending delete of the same record and the other way round.
                    stored.pendingRecordZoneChanges.removeAll { $0.recordID == change.recordID && $0 != change }
                    if !stored.pendingRecordZoneChanges.contains(change) { stored.pendingRecordZoneChanges.append(change) }
                }
            }
        }

        public func remove(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            update(added: false) { stored in stored.pendingRecordZoneChanges.removeAll { changes.contains($0) } }
        }

        public func add(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            update(added: true) { stored in
                for change in changes {
                    stored.pendingDatabaseChanges.removeAll { $0.zoneID == change.zoneID }
                    stored.pendingDatabaseChanges.append(change)
                }
            }
        }

        public func remove(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            update(added: false) { stored in stored.pendingDatabaseChanges.removeAll { changes.contains($0) } }
        }

        public var description: String {
            lock.withLock {
                "<CKSyncEngine.State pendingRecordZoneChanges=\(stored.pendingRecordZoneChanges.count) pendingDatabaseChanges=\(stored.pendingDatabaseChanges.count) unfetchedZones=\(stored.unfetchedZones.count)>"
            }
        }

        // MARK: The engine's side

        /// A change the app makes: journaled before returning, then told to the engine.
        private func update(added: Bool, _ change: (inout Stored) -> Void) {
            track(change)
            onAppChange?(added)
        }

        /// Changes what the engine tracks (tokens, account, sends in flight), journaled too.
        func track(_ change: (inout Stored) -> Void) {
            lock.withLock {
                let lineage = stored.lineage
                change(&stored)
                stored.revision += 1
                journal?.write(stored, replacing: lineage)
            }
        }

        var snapshot: Stored { lock.withLock { stored } }

        /// How often `change` was added so far; compare after its request to see whether it
        /// was added again meanwhile.
        func additionCount(_ change: PendingRecordZoneChange) -> Int { lock.withLock { additions[change] ?? 0 } }

        /// Removes changes that were sent, unless added again after `counts` were taken.
        func removeSent(_ counts: [PendingRecordZoneChange: Int]) {
            track { stored in
                let done = Set(counts.filter { additions[$0.key, default: 0] == $0.value }.keys)
                stored.pendingRecordZoneChanges.removeAll { done.contains($0) }
            }
        }

        /// Moves changes that stay pending after a failure the engine retries by itself to the
        /// end of the list, so the delegate's next batch starts with changes not yet tried.
        func requeue(_ changes: [PendingRecordZoneChange]) {
            track { stored in
                for change in changes where stored.pendingRecordZoneChanges.contains(change) {
                    stored.pendingRecordZoneChanges.removeAll { $0 == change }
                    stored.pendingRecordZoneChanges.append(change)
                }
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

/// The device's copy of one history (lineage) of an engine's state, rewritten atomically at
/// every change: what carries pending changes across a crash the app's own copy of the state
/// did not see. One file per container, database and lineage, beside the long-lived
/// operations; an engine reads only the file of the lineage the app handed it, so engines
/// started fresh in one process (two test devices) never see each other's.
struct SyncEngineJournal: Sendable {
    let directory: URL
    let scope: CKDatabase.Scope
    /// A journal no engine wrote to for this long belongs to a state no app kept (an engine
    /// replaced, a test device): removed when another engine of the database starts. So are
    /// all but the newest `keptJournals` (an app has one engine a database; tests make many).
    static let abandonedAfter: TimeInterval = 30 * 24 * 3600
    static let keptJournals = 8

    init(directory: URL, scope: CKDatabase.Scope) {
        self.directory = directory
        self.scope = scope
    }

    func file(_ lineage: String) -> URL { directory.appendingPathComponent("sync-engine-\(scope.name)-\(lineage).state") }
    /// Before lineages had files of their own: one journal per database.
    var sharedFile: URL { directory.appendingPathComponent("sync-engine-\(scope.name).state") }

    func write(_ stored: CKSyncEngine.State.Stored, replacing previous: String?) {
        let file = file(stored.lineage)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try JSONEncoder().encode(stored).write(to: file, options: .atomic)
            if let previous, previous != stored.lineage { try? FileManager.default.removeItem(at: self.file(previous)) }
        } catch {
            // The app's serialization still carries the state; only crash safety is lost.
            CKSyncEngine.logger.warning("could not write the sync engine's journal \(file.path): \(error)")
        }
    }

    /// The journal of `lineage`, if this device has one (in its own file, or in the shared
    /// file an earlier NimbusKit wrote).
    func read(lineage: String) -> CKSyncEngine.State.Stored? {
        for file in [file(lineage), sharedFile] {
            guard let data = FileManager.default.contents(atPath: file.path) else { continue }
            do {
                let stored = try JSONDecoder().decode(CKSyncEngine.State.Stored.self, from: data)
                if stored.lineage == lineage { return stored }
            } catch {
                CKSyncEngine.logger.warning("the sync engine's journal \(file.path) does not read (\(error)); starting from the app's state")
            }
        }
        return nil
    }

    /// Removes the shared journal of earlier versions, and journals of other lineages that
    /// nothing wrote to for `abandonedAfter` or that are not among the `keptJournals` newest.
    func removeAbandoned(keeping lineage: String, now: Date = Date()) {
        let prefix = "sync-engine-\(scope.name)-"
        try? FileManager.default.removeItem(at: sharedFile)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        let own = file(lineage).lastPathComponent
        let others = names.filter { $0.hasPrefix(prefix) && $0.hasSuffix(".state") && $0 != own }
        let byAge = others.map { name -> (URL, Date) in
            let url = directory.appendingPathComponent(name)
            return (url, (try? FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date) ?? now)
        }.sorted { $0.1 > $1.1 }
        for (index, (url, modified)) in byAge.enumerated()
        where index >= Self.keptJournals || now.timeIntervalSince(modified) > Self.abandonedAfter {
            try? FileManager.default.removeItem(at: url)
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
