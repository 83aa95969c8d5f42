import NimbusStorage

/// A record's state on either side of one committed change: `before` nil for a creation,
/// `after` nil for a deletion.
struct RecordChange: Sendable {
    var zoneName: String
    var before: RecordRow?
    var after: RecordRow?

    var recordName: String { (after ?? before)!.recordName }
    var recordType: String { (after ?? before)!.recordType }
}

/// What one committed request changed in one database: the input of subscription matching.
struct CommittedChanges: Sendable {
    var database: DatabaseRow
    /// The device that made the change; it is not told about it.
    var deviceID: String
    var records: [RecordChange]
    /// Zones created or deleted (database subscriptions fire on them).
    var zones: [(name: String, deleted: Bool)]
}

/// Collects the changes of one write transaction as it runs. Operations that run in a
/// savepoint mark the log first and roll it back with the savepoint, so only changes that
/// commit are reported.
final class ChangeLog {
    private(set) var records: [RecordChange] = []
    private(set) var zones: [(name: String, deleted: Bool)] = []
    /// Bytes the changed records added to their database (negative: freed), for its quota
    /// (`RecordRow.storedBytes` and the sizes of their assets); the writer adds them to the
    /// database once, at the end.
    private(set) var usedBytes: Int64 = 0

    func recordChanged(zone: ZoneRow, before: RecordRow?, after: RecordRow?) {
        records.append(RecordChange(zoneName: zone.name, before: before, after: after))
        usedBytes += (after?.storedBytes ?? 0) - (before?.storedBytes ?? 0)
    }

    /// Bytes of assets a record took on (negative: let go of), for its database's quota.
    func assetBytesChanged(_ bytes: Int64) {
        usedBytes += bytes
    }

    func zoneChanged(_ name: String, deleted: Bool) {
        zones.append((name, deleted))
    }

    /// Runs `body` in a savepoint of `tx`; if it throws, its log entries go with its writes.
    func savepoint<Value>(_ tx: UnitOfWork, _ body: () throws -> Value) throws -> Value {
        let marks = (records.count, zones.count, usedBytes)
        do {
            return try tx.savepoint(body)
        } catch {
            records.removeSubrange(marks.0...)
            zones.removeSubrange(marks.1...)
            usedBytes = marks.2
            throw error
        }
    }

    func committed(in database: DatabaseRow, deviceID: String) -> CommittedChanges? {
        guard !records.isEmpty || !zones.isEmpty else { return nil }
        return CommittedChanges(database: database, deviceID: deviceID, records: records, zones: zones)
    }
}
