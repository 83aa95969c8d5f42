/// Earlier versions of records, kept for time travel (docs/operations.md, "Time travel").
///
/// The engine keeps them itself: a trigger on the records table copies a record's row as it
/// was each time a write replaces it (saved over, deleted to a tombstone), stamped with the
/// replacing write's time. Every write path (the SQLite driver, units of work, `nimbus_apply`
/// on PostgreSQL) is covered without a line of theirs knowing, and a store with keeping off
/// pays one settings lookup per replaced row. A second trigger notes when a record lets go of
/// an asset blob, so the collector keeps the bytes an earlier version holds.
///
/// What a zone looked like at a moment T follows from two facts: a record whose current row
/// was written at or before T is as it was; for any other, the earliest version replaced
/// after T is how it was at T if that version was written by T, and when it was written
/// after T, or there is none, the record was made after T. That holds
/// for every T since versions have been kept without a gap (`RecordHistoryState.keptSince`)
/// and inside the retention (nothing replaced after T has been pruned).
public protocol RecordHistoryStore: Sendable {
    /// Keeps versions for `days` (noting since when, if keeping was off), or with 0 stops
    /// (dropping what was kept: versions made while it is off are missing, so the rest could
    /// not answer for any moment). The setting is the store's, so every node and every verb
    /// that opens the store sees the same. Returns the state afterwards.
    func keepRecordHistory(days: Int, now: Int64) async throws -> RecordHistoryState
    func recordHistoryState() async throws -> RecordHistoryState
    /// What changed in a zone after `time` (milliseconds since 1970).
    func zoneHistory(zoneID: Int64, after time: Int64) async throws -> ZoneHistory
    /// Removes versions (and released asset notes) replaced before `time`; returns how many went.
    func pruneRecordHistory(before time: Int64) async throws -> Int
    /// What kept versions take: their count and bytes (name, type and fields, as
    /// `RecordRow.storedBytes` counts a record), for one database or, with nil, the store.
    func recordHistoryFigures(databaseID: Int64?) async throws -> RecordHistoryFigures
}

/// A driver whose engine keeps record versions.
public protocol RecordHistoryStoring: Sendable {
    var recordHistory: (any RecordHistoryStore)? { get }
}

/// A unit-of-work driver keeps versions where its engine keeps them.
extension UnitOfWorkDriver: RecordHistoryStoring {
    public var recordHistory: (any RecordHistoryStore)? { (base as? any RecordHistoryStoring)?.recordHistory }
}

public struct RecordHistoryState: Sendable, Hashable {
    /// Since when versions have been kept without a gap (milliseconds since 1970); nil: off.
    public var keptSince: Int64?
    /// How long a version is kept (`Limits.recordHistoryDays` unless the operator chose).
    public var days: Int

    public init(keptSince: Int64?, days: Int) {
        self.keptSince = keptSince
        self.days = days
    }

    /// The oldest moment a zone can be restored to at `now`; nil when versions are not kept.
    public func oldestMoment(now: Int64) -> Int64? {
        guard let keptSince, days > 0 else { return nil }
        return max(keptSince, now - Int64(days) * 86_400_000)
    }
}

/// A record as it was before a write replaced it.
public struct RecordVersion: Sendable, Hashable {
    /// When the replacing write happened (its modification time), milliseconds since 1970.
    public var replacedAt: Int64
    /// The row as it was (a tombstone when the write brought a deleted record back).
    public var row: RecordRow

    public init(replacedAt: Int64, row: RecordRow) {
        self.replacedAt = replacedAt
        self.row = row
    }
}

/// What changed in a zone after a moment.
public struct ZoneHistory: Sendable, Hashable {
    /// Versions replaced after the moment, oldest first (by time, then by when they were kept).
    public var versions: [RecordVersion]
    /// The zone's current rows (tombstones included) written after the moment.
    public var current: [RecordRow]

    public init(versions: [RecordVersion], current: [RecordRow]) {
        self.versions = versions
        self.current = current
    }
}

public struct RecordHistoryFigures: Sendable, Hashable {
    public var versions: Int64
    public var bytes: Int64

    public init(versions: Int64, bytes: Int64) {
        self.versions = versions
        self.bytes = bytes
    }
}
