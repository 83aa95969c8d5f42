import Synchronization

/// `StorageDriver` over a `CoarseStorage`: runs each transaction closure as a unit of work
/// (`UnitOfWork`) against rows loaded by key, loading what it turns out to need and running it
/// again, then applies its writes in one `apply`. A request costs its loads plus one apply,
/// whatever its size; `writeRoundTrips` and `readRoundTrips` count them.
///
/// Writes are group-committed (`UnitGroupCommitter`): the writes that arrive while one group
/// is being decided and applied are decided together as the next one, one after the other over
/// the same loaded rows, and applied in one call, so a busy store costs a round trip per group,
/// not per write.
public final class UnitOfWorkDriver: StorageDriver {
    public let base: any CoarseStorage
    private let units: UnitRunner
    private let commits: UnitGroupCommitter
    /// `base` when it runs units in its own transactions (SQLite): a read loads as it reads and
    /// runs once; a write is decided in the writer's transaction (no loads to repeat, no checks
    /// at apply, the engine's own group commit).
    private let inProcess: (any InProcessStorage)?

    /// `checksPurity`: every write's unit is run once more over the same rows a little later,
    /// and a unit that decides differently fails (`UnitRunner.checkPurity`). The tests' units
    /// pass turns it on; it doubles the deciding, so a server does not.
    public init(_ base: any CoarseStorage, idBlock: Int = 256, checksPurity: Bool = false) {
        self.base = base
        self.units = UnitRunner(base: base, ids: StorageIDReserve(block: idBlock), checksPurity: checksPurity)
        self.commits = UnitGroupCommitter(units: units)
        self.inProcess = base as? any InProcessStorage
    }

    /// Loads, id reservations and applies sent to `base` so far by writes and by reads: the
    /// round trips a networked engine would make (apart from its BEGIN and COMMIT).
    public var writeRoundTrips: Int { units.writeRoundTrips.load(ordering: .relaxed) }
    public var readRoundTrips: Int { units.readRoundTrips.load(ordering: .relaxed) }
    /// Groups of writes decided again after colliding with another writer, and groups decided
    /// in a zone's turn (`ZoneTurns`).
    public var writeCollisions: Int { commits.collisions.load(ordering: .relaxed) }
    public var zoneTurns: Int { commits.turns.load(ordering: .relaxed) }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value
    {
        // In process (SQLite), the read runs once over the engine's own read transaction.
        if let value = try await base.withRowSource(kind, { source in try UnitRunner.read(from: source, body) }) {
            return value
        }
        return try await units.run(kind) { unit in try body(unit) }
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        try await write(pipeline: nil, body)
    }

    /// Grouped with the writes of that zone only: a busy zone (or one colliding with another
    /// node) never holds up a write to another zone.
    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await write(pipeline: zone, body)
    }

    private func write<Value: Sendable>(pipeline: ZoneOrder?, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        if let inProcess {
            do {
                return try await inProcess.writeInProcess { transaction in
                    try UnitRunner.decide(in: transaction, assumingCreatesAbsent: true, body)
                }
            } catch is CreatedRecordExists {
                // A create named a record that exists, or its tombstone: undone with the
                // writer's savepoint, and decided again over the records read.
                return try await inProcess.writeInProcess { transaction in
                    try UnitRunner.decide(in: transaction, assumingCreatesAbsent: false, body)
                }
            }
        }
        let value = WrittenValue<Value>()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            commits.submit(
                PendingWrite(run: { unit in value.value = try body(unit) }, complete: { continuation.resume(with: $0) }),
                pipeline: pipeline)
        }
        guard let decided = value.value else { throw StorageError.corrupt("a write completed without its value") }
        return decided
    }

    public var accounts: any AccountStore { base.accounts }
    public var push: any PushStore { base.push }
    public var assets: any AssetStore { base.assets }
    public var shares: any ShareStore { base.shares }
    public var operations: any OperationOutcomeStore { base.operations }
    public var operators: any OperatorStore { base.operators }
    public var partitioning: any PartitionStore { base.partitioning }
    public func close() async throws { try await base.close() }
    public func signals() -> AsyncStream<StoreSignal>? { base.signals() }
}

/// A group of writes decided as one unit: each write's outcome, the changes to apply, and the
/// rows the unit leaves for the next group of its pipeline when it was asked for them
/// (`UnitGroupCommitter`).
struct DecidedGroup: Sendable {
    let outcomes: [Result<Void, any Error>]
    let changes: UnitOfWorkChanges
    let rows: DecidedRows?
    /// Decided over rows an earlier group left (`DecidedRows`), not over rows loaded for it
    /// alone: an apply that refuses it says those were stale, not that another writer collided
    /// with a decision from fresh rows.
    let overCarriedRows: Bool
}

/// A write's value, set by the run of its closure that counted (the committer resumes the
/// writer only after that run, so no two threads touch it at once).
final class WrittenValue<Value>: @unchecked Sendable {
    var value: Value?
}

/// Runs units of work over `base`: loads what they miss and runs them again.
final class UnitRunner: Sendable {
    let base: any CoarseStorage
    let ids: StorageIDReserve
    let writeRoundTrips = Atomic<Int>(0)
    let readRoundTrips = Atomic<Int>(0)
    let checksPurity: Bool
    /// Past this many loads a closure is taken to be reading without end (a bug), not growing.
    static let loadsPerUnit = 64

    init(base: any CoarseStorage, ids: StorageIDReserve, checksPurity: Bool = false) {
        self.base = base
        self.ids = ids
        self.checksPurity = checksPurity
    }

    /// Runs a read's `body` until it no longer misses anything. A point read's loads do without
    /// the schema (`LoadRequest.schemaWithZones`).
    func run<Value>(_ kind: ReadKind, _ body: (UnitOfWork) throws -> Value) async throws -> Value {
        var value: Value?
        _ = try await decide(
            counting: readRoundTrips, schemaWithZones: kind.size == .scan, writes: false,
            source: kind.replicaMayServe ? .caughtUpReplica : .primary
        ) { unit in
            do {
                value = try body(unit)
                return unit.missed.isEmpty ? nil : ReadUnit.Miss(keys: unit.missed)
            } catch let stopped as ReadUnit.Miss {
                return stopped
            } catch {
                // A run that took missing rows for absent may fail for that alone.
                guard !unit.missed.isEmpty else { throw error }
                return ReadUnit.Miss(keys: unit.missed)
            }
        }
        guard let value else { throw StorageError.corrupt("a unit of work finished without its value") }
        return value
    }

    /// Runs writes one after the other in one unit, each undone alone when it fails, until no
    /// run misses anything: their outcomes, the unit's changes, and the rows it leaves when
    /// `handingOnRows` (for a zone's next group). Decided `after` another group (applied, or
    /// not applied yet), the unit's reads see what that group left.
    func decide(_ writes: [PendingWrite], after prior: DecidedRows? = nil, handingOnRows: Bool = false) async throws -> DecidedGroup {
        var outcomes: [Result<Void, any Error>] = []
        let unit = try await decide(counting: writeRoundTrips, schemaWithZones: true, writes: true, after: prior) { unit in
            outcomes = []
            var miss = ReadUnit.Miss()
            for write in writes {
                let outcome = unit.isolated { try write.run(unit) }
                if case .failure(let stopped as ReadUnit.Miss) = outcome { miss.merge(stopped) }
                outcomes.append(outcome)
            }
            miss.keys.formUnion(unit.missed)
            return miss.isEmpty ? nil : miss
        }
        let changes = unit.changes
        return DecidedGroup(outcomes: outcomes, changes: changes, rows: handingOnRows ? unit.decidedRows : nil, overCarriedRows: prior != nil)
    }

    /// Runs `attempt` over the rows loaded so far until it reports no miss, loading (and
    /// reserving ids for) what each miss names: the networked loop. An engine in process never
    /// gets here (its reads run once, `read(from:)`; its writes in its transaction,
    /// `decide(in:)`).
    private func decide(
        counting roundTrips: borrowing Atomic<Int>, schemaWithZones: Bool, writes: Bool, source: LoadSource = .primary,
        after prior: DecidedRows? = nil, _ attempt: (UnitOfWork) throws -> ReadUnit.Miss?
    ) async throws -> UnitOfWork {
        var source = source
        var loaded = prior?.carried ?? LoadedRows()
        let unitIDs = UnitIDs()
        var lastMiss: ReadUnit.Miss?
        // Reservations from the engine grow eightfold each time a run runs out again (ids left
        // over go back to the reserve): a group of 64 batches of 200 new records needs 12,800,
        // which one block at a time took 50 runs of the whole group.
        var reservations = 0
        var wanted: [StorageIDKind: Int] = [:]
        // A zone's write that needs no load (`DecidedRows`) would otherwise run once only to
        // find it has no record id; what it leaves goes back to the reserve.
        if prior != nil, let range = ids.takeRange(.record) { unitIDs.add(.record, range) }
        for _ in 0..<Self.loadsPerUnit {
            unitIDs.startRun()
            let unit = UnitOfWork(loaded: loaded, ids: unitIDs, after: prior)
            unit.decidesWrites = writes
            let outcome = try attempt(unit)
            loaded = unit.loaded
            guard let miss = outcome else {
                if writes && checksPurity {
                    try await checkPurity(of: unit.changes, loaded: loaded, ids: unitIDs, after: prior, attempt)
                }
                // The ids the counting run left unused go back for the next unit.
                for (kind, range) in unitIDs.unused { ids.add(kind, range) }
                return unit
            }
            lastMiss = miss
            wanted.merge(miss.idsWanted, uniquingKeysWith: max)
            for kind in miss.ids {
                // At least one more id, and as many as the unit was expected to want: a hint
                // alone reserves nothing (the records a write names may all exist already).
                var short = max(1, (wanted[kind] ?? 0) - unitIDs.count(kind))
                while short > 0, let range = ids.takeRange(kind) {
                    unitIDs.add(kind, range)
                    short -= range.count
                }
                if short > 0 {
                    roundTrips.add(1, ordering: .relaxed)
                    let count = max(short, ids.block << min(3 * reservations, 24))
                    unitIDs.add(kind, try await base.reserveIDs(kind, count: count))
                    reservations += 1
                }
            }
            let request = LoadRequest(
                keys: miss.keys, scans: miss.scans, schemaWithZones: schemaWithZones, schemaWithVersion: writes, source: source)
            if !request.keys.isEmpty || !request.scans.isEmpty {
                roundTrips.add(1, ordering: .relaxed)
                let rows = try await base.load(request)
                // The unit's later loads go where its first went (`LoadSource.server`).
                if source == .caughtUpReplica { source = rows.server.map(LoadSource.server) ?? .primary }
                loaded.merge(rows)
            }
        }
        throw StorageError.corrupt("a unit of work still needed more rows after \(Self.loadsPerUnit) loads, last \(lastMiss.map { "\($0)" } ?? "none")")
    }

    /// Runs a write's unit again over the rows and ids its counting run had, past the next
    /// millisecond, and fails when it decides other writes: its closure read the clock or a
    /// random source (or a value that varies run to run), which a unit of work must take as
    /// input instead (docs/storage.md), since over a network it runs again after each load.
    private func checkPurity(
        of decided: UnitOfWorkChanges, loaded: LoadedRows, ids unitIDs: UnitIDs, after prior: DecidedRows?,
        _ attempt: (UnitOfWork) throws -> ReadUnit.Miss?
    ) async throws {
        try await Task.sleep(for: .microseconds(1_100))
        unitIDs.startRun()
        let again = UnitOfWork(loaded: loaded, ids: unitIDs, after: prior)
        let missed = try attempt(again)
        let writes = again.changes.writes
        guard missed != nil || writes != decided.writes else { return }
        let index = zip(writes, decided.writes).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(writes.count, decided.writes.count)
        let first = index < decided.writes.count ? String("\(decided.writes[index])".prefix(400)) : "none"
        let second = index < writes.count ? String("\(writes[index])".prefix(400)) : "none"
        throw StorageError.corrupt(
            "a unit of work decided differently when run again over the same rows, so its closure reads the clock or a "
                + "random source: write \(index) was \(first), then \(second)\(missed.map { "; it missed \($0)" } ?? "")")
    }

    /// A read answered in process: its unit loads as it reads from one read transaction of the
    /// engine, so it runs once, with no loop around it and no ids (it writes nothing).
    static func read<Value>(from source: any UnitRowSource, _ body: (ReadUnit) throws -> Value) throws -> Value {
        do {
            return try body(ReadUnit(loaded: LoadedRows(), source: source))
        } catch let miss as ReadUnit.Miss {
            throw StorageError.corrupt("a unit of work missed \(miss) reading in process")
        }
    }

    /// A write decided and applied inside the engine's own transaction: the unit loads as it
    /// reads and takes ids from the transaction as it needs them, so it runs once, unless its
    /// creates took a record to be absent that exists (`assumingCreatesAbsent`): then it throws
    /// `CreatedRecordExists`, and the caller undoes it and decides it again without assuming.
    static func decide<Value>(in transaction: any UnitTransaction, assumingCreatesAbsent: Bool, _ body: (UnitOfWork) throws -> Value)
        throws -> Value
    {
        let unit = UnitOfWork(loaded: LoadedRows(), ids: UnitIDs(), source: transaction)
        unit.assumesCreatesAbsent = assumingCreatesAbsent
        let value: Value
        do {
            value = try body(unit)
        } catch let miss as ReadUnit.Miss {
            throw StorageError.corrupt("a unit of work missed \(miss) inside its own transaction")
        } catch {
            // The failure may rest on a record taken to be absent (an atomic batch's other
            // failure, a reference to it): it stands only if none exists. A check that cannot
            // run (the engine failed) leaves the unit's own failure to be answered.
            if !unit.assumedAbsent.isEmpty {
                do {
                    try transaction.requireAbsent(unit.assumedAbsent)
                } catch let exists as CreatedRecordExists {
                    throw exists
                } catch {}
            }
            throw error
        }
        try transaction.applyDecided(unit.changes)
        return value
    }

    func apply(_ changes: UnitOfWorkChanges) async throws {
        guard !changes.isEmpty else { return }
        writeRoundTrips.add(1, ordering: .relaxed)
        try await base.apply(changes)
    }
}

/// Storage ids reserved from the engine and not used yet, handed to units of work a range at a
/// time.
final class StorageIDReserve: Sendable {
    let block: Int
    private let free = Mutex<[StorageIDKind: [ClosedRange<Int64>]]>([:])

    init(block: Int) { self.block = block }

    func takeRange(_ kind: StorageIDKind) -> ClosedRange<Int64>? {
        free.withLock { free in
            guard var ranges = free[kind], !ranges.isEmpty else { return nil }
            let range = ranges.removeFirst()
            free[kind] = ranges
            return range
        }
    }

    func add(_ kind: StorageIDKind, _ range: ClosedRange<Int64>) {
        free.withLock { $0[kind, default: []].append(range) }
    }
}

/// The ids one unit of work may give new rows: ranges taken for it, handed out in order. Every
/// run of the unit starts again from the first, so the runs that do not count use up nothing,
/// and a unit (or a group of writes) needing more than a block gets it in a few runs.
final class UnitIDs {
    /// One kind's ranges and how far this run has taken them: `range` is the range the next id
    /// comes from and `offset` the ids already taken from it, so taking one is a step, not a
    /// walk over every range (a unit in process takes its ids from ranges of 64 added as it goes).
    private struct Ranges {
        var ranges: [ClosedRange<Int64>] = []
        var range = 0
        var offset = 0
    }
    /// By kind, in `StorageIDKind.allCases` order: an array, not a dictionary, since a record's
    /// save takes an id and hashing the kind each time was most of the taking.
    private var kinds = [Ranges](repeating: Ranges(), count: StorageIDKind.allCases.count)

    private static func slot(_ kind: StorageIDKind) -> Int {
        switch kind {
        case .database: 0
        case .zone: 1
        case .record: 2
        }
    }

    func startRun() {
        for slot in kinds.indices {
            kinds[slot].range = 0
            kinds[slot].offset = 0
        }
    }

    func add(_ kind: StorageIDKind, _ range: ClosedRange<Int64>) { kinds[Self.slot(kind)].ranges.append(range) }

    /// How many ids of the kind the unit holds, taken or not.
    func count(_ kind: StorageIDKind) -> Int { kinds[Self.slot(kind)].ranges.reduce(0) { $0 + $1.count } }

    /// The next id of this run, or nil when the ranges are used up.
    func take(_ kind: StorageIDKind) -> Int64? {
        let slot = Self.slot(kind)
        while kinds[slot].range < kinds[slot].ranges.count {
            let range = kinds[slot].ranges[kinds[slot].range]
            if kinds[slot].offset < range.count {
                defer { kinds[slot].offset += 1 }
                return range.lowerBound + Int64(kinds[slot].offset)
            }
            kinds[slot].range += 1
            kinds[slot].offset = 0
        }
        return nil
    }

    /// What this run did not take: the rest of the range it was taking from, and the ranges after.
    var unused: [(StorageIDKind, ClosedRange<Int64>)] {
        StorageIDKind.allCases.flatMap { kind in
            let state = kinds[Self.slot(kind)]
            return state.ranges.indices.dropFirst(state.range).compactMap { index -> (StorageIDKind, ClosedRange<Int64>)? in
                let (range, used) = (state.ranges[index], index == state.range ? state.offset : 0)
                guard used < range.count else { return nil }
                return (kind, (range.lowerBound + Int64(used))...range.upperBound)
            }
        }
    }
}
