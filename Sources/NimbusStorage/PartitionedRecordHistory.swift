/// Record history (time travel) over partitions: each partition keeps its own records'
/// versions, so a zone's history is read where the zone lives, which its id says
/// (`PartitionIDs`), and the setting, pruning and figures go to every partition.
struct PartitionedRecordHistory: RecordHistoryStore {
    /// Each partition's history, by partition number, the home's (0) first.
    let partitions: [(number: Int64, name: String, history: any RecordHistoryStore)]

    private var home: any RecordHistoryStore { partitions[0].history }

    private func history(of id: Int64) throws -> any RecordHistoryStore {
        let number = PartitionIDs.partition(of: id)
        guard let found = partitions.first(where: { $0.number == number }) else {
            throw StorageError.unavailable("id \(id) was made by partition \(number), which this node does not have")
        }
        return found.history
    }

    /// The home's setting, made every partition's; one that does not answer is left as it is
    /// (its versions start when a node starts while it answers) and holds up no one else.
    func keepRecordHistory(days: Int, now: Int64) async throws -> RecordHistoryState {
        let state = try await home.keepRecordHistory(days: days, now: now)
        for partition in partitions.dropFirst() { _ = try? await partition.history.keepRecordHistory(days: days, now: now) }
        return try await combined(home: state)
    }

    func recordHistoryState() async throws -> RecordHistoryState {
        try await combined(home: try await home.recordHistoryState())
    }

    /// What every partition that answers can answer for: kept since the latest of their
    /// starts, and not at all when one of them keeps nothing (a zone there could not be
    /// restored). Partitions that do not answer cannot be restored from now anyway.
    private func combined(home state: RecordHistoryState) async throws -> RecordHistoryState {
        var combined = state
        for partition in partitions.dropFirst() {
            guard let other = try? await partition.history.recordHistoryState() else { continue }
            combined.keptSince = combined.keptSince.flatMap { mine in other.keptSince.map { max(mine, $0) } }
            combined.days = min(combined.days, other.days)
        }
        return combined
    }

    func zoneHistory(zoneID: Int64, after time: Int64) async throws -> ZoneHistory {
        try await history(of: zoneID).zoneHistory(zoneID: zoneID, after: time)
    }

    func pruneRecordHistory(before time: Int64) async throws -> Int {
        var pruned = 0
        for partition in partitions { pruned += (try? await partition.history.pruneRecordHistory(before: time)) ?? 0 }
        return pruned
    }

    func recordHistoryFigures(databaseID: Int64?) async throws -> RecordHistoryFigures {
        if let databaseID { return try await history(of: databaseID).recordHistoryFigures(databaseID: databaseID) }
        var total = RecordHistoryFigures(versions: 0, bytes: 0)
        for partition in partitions {
            let figures = try await partition.history.recordHistoryFigures(databaseID: nil)
            total.versions += figures.versions
            total.bytes += figures.bytes
        }
        return total
    }
}

extension PartitionedStorage: RecordHistoryStoring {
    /// Every partition's history when each partition's store keeps one; nil (time travel off)
    /// when one cannot.
    public var recordHistory: (any RecordHistoryStore)? {
        var partitions: [(number: Int64, name: String, history: any RecordHistoryStore)] = []
        for partition in [StoragePartition(name: Self.home, number: 0, store: wrapped)] + otherPartitions {
            guard let history = (partition.store as? any RecordHistoryStoring)?.recordHistory else { return nil }
            partitions.append((partition.number, partition.name, history))
        }
        return PartitionedRecordHistory(partitions: partitions)
    }
}

extension LazyPartition: RecordHistoryStoring {
    /// The partition's history once it is open (`LazyPartition`).
    public var recordHistory: (any RecordHistoryStore)? { OpeningRecordHistory(partition: self) }
}

/// A lazily opened partition's history: opens it first; a store that keeps none says so.
private struct OpeningRecordHistory: RecordHistoryStore {
    let partition: LazyPartition

    private func history() async throws -> any RecordHistoryStore {
        guard let history = (try await partition.store() as? any RecordHistoryStoring)?.recordHistory else {
            throw StorageError.unavailable("partition '\(partition.name)' keeps no record history")
        }
        return history
    }

    func keepRecordHistory(days: Int, now: Int64) async throws -> RecordHistoryState {
        try await history().keepRecordHistory(days: days, now: now)
    }
    func recordHistoryState() async throws -> RecordHistoryState { try await history().recordHistoryState() }
    func zoneHistory(zoneID: Int64, after time: Int64) async throws -> ZoneHistory {
        try await history().zoneHistory(zoneID: zoneID, after: time)
    }
    func pruneRecordHistory(before time: Int64) async throws -> Int { try await history().pruneRecordHistory(before: time) }
    func recordHistoryFigures(databaseID: Int64?) async throws -> RecordHistoryFigures {
        try await history().recordHistoryFigures(databaseID: databaseID)
    }
}
