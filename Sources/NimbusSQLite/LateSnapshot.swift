import GRDB
import NimbusStorage

/// A point read's rows (`UnitRowSource`) on a reader connection, from one snapshot that begins
/// with the unit's first statement, not before it.
///
/// A unit whose first load is a lookup's zone and records (`load(records:inZone:ofDatabase:)`,
/// one statement) runs that statement alone, outside any transaction: one statement is one
/// snapshot already, and a fetch by ID then steps one statement instead of four (`BEGIN`, the
/// zone, the record, `COMMIT`). Should that unit load anything more, the rows it has came from
/// a snapshot that is gone, so the load refuses (`SnapshotNeeded`) and the unit runs again from
/// the start inside a transaction. Every other unit begins its transaction just before its
/// first statement, as `SQLiteStorage.inSnapshot` would have begun it before.
final class LateSnapshot: UnitRowSource {
    private enum State {
        /// No statement yet; `alone`: the first may be a lookup's, run outside a transaction.
        case fresh(alone: Bool)
        /// One statement ran outside a transaction: nothing more may be read from its snapshot.
        case ranAlone
        /// Inside `BEGIN … COMMIT`: every statement sees the first one's snapshot.
        case begun
        /// A load came after a statement that ran alone: this run does not count.
        case refused
    }

    private var refused: Bool {
        if case .refused = state { return true }
        return false
    }

    /// Thrown by a load that would read from a second snapshot; the unit runs again.
    struct SnapshotNeeded: Error {}

    /// The connection's transaction (a test's raw statements run on it, outside the unit).
    let transaction: SQLiteTransaction
    private var state: State

    private init(_ transaction: SQLiteTransaction, alone: Bool) {
        self.transaction = transaction
        state = .fresh(alone: alone)
    }

    /// `body` over rows read from one snapshot of `transaction`'s connection: first with a
    /// lookup's statement alone, then, when the unit read more, again inside a transaction.
    static func read<Value>(_ transaction: SQLiteTransaction, _ body: (any UnitRowSource) throws -> Value) throws -> Value {
        let first = LateSnapshot(transaction, alone: true)
        do {
            let value = try first.run(body)
            // A unit that caught the refusal and went on answered from rows it lacked.
            if !first.refused { return value }
        } catch {
            guard first.refused else { throw error }
        }
        return try LateSnapshot(transaction, alone: false).run(body)
    }

    private func run<Value>(_ body: (any UnitRowSource) throws -> Value) throws -> Value {
        let db = transaction.db
        // A reader connection is read-only: ending its transaction either way is the same, and
        // a connection never goes back to its list inside one.
        defer { if db.isInsideTransaction { try? db.executeBound("ROLLBACK TRANSACTION") } }
        let value = try body(self)
        if case .begun = state { try db.executeBound("COMMIT TRANSACTION") }
        return value
    }

    /// Before a statement that must share a snapshot with any that follow it.
    private func begin() throws {
        switch state {
        case .fresh:
            try transaction.db.executeBound("BEGIN DEFERRED TRANSACTION")
            state = .begun
        case .begun:
            return
        case .ranAlone, .refused:
            state = .refused
            throw SnapshotNeeded()
        }
    }

    func load(records names: [String], inZone zoneName: String, ofDatabase database: DatabaseRow, into rows: inout LoadedRows)
        throws
    {
        // Past one statement's names, the lookup reads in several: a transaction holds them.
        if case .fresh(alone: true) = state, names.count <= SQLiteTransaction.namesPerRead {
            state = .ranAlone
        } else {
            try begin()
        }
        try transaction.load(records: names, inZone: zoneName, ofDatabase: database, into: &rows)
    }

    func load(_ key: LoadKey, into rows: inout LoadedRows) throws {
        try begin()
        try transaction.load(key, into: &rows)
    }

    func load(records names: [String], inZone zoneName: String, of database: DatabaseKey, into rows: inout LoadedRows) throws {
        try begin()
        try transaction.load(records: names, inZone: zoneName, of: database, into: &rows)
    }

    func scan(_ scan: LoadScan) throws -> ScanResult {
        try begin()
        return try transaction.scan(scan)
    }
}
