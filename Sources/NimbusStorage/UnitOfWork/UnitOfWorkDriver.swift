import Synchronization

/// `StorageDriver` over a `CoarseStorage`: runs each transaction closure as a unit of work
/// (`UnitOfWork`) against rows loaded by key, loading what it turns out to need and running it
/// again, then applies its writes in one `apply`. A request costs its loads plus one apply,
/// whatever its size; `writeRoundTrips` and `readRoundTrips` count them.
public final class UnitOfWorkDriver: StorageDriver {
    public let base: any CoarseStorage
    let ids: StorageIDReserve
    private let gates = DatabaseGates()
    /// Loads, id reservations and applies sent to `base` so far by writes and by reads: the
    /// round trips a networked engine would make (apart from its BEGIN and COMMIT).
    public let writeRoundTrips = Atomic<Int>(0)
    public let readRoundTrips = Atomic<Int>(0)
    /// Past this many loads a closure is taken to be reading without end (a bug), not growing.
    static let loadsPerUnit = 64

    public init(_ base: any CoarseStorage, idBlock: Int = 256) {
        self.base = base
        self.ids = StorageIDReserve(block: idBlock)
    }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (any StorageReader) throws -> Value) async throws
        -> Value
    {
        try await run(counting: readRoundTrips) { unit in try body(unit) }.value
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (any StorageWriter) throws -> Value) async throws -> Value {
        var (value, changes) = try await run(counting: writeRoundTrips) { unit in try body(unit) }
        guard !changes.isEmpty else { return value }
        // Writers of one database in this process take turns to apply: a unit that finds the
        // database moved on while it waited decides again from fresh rows, under its turn,
        // instead of failing and retrying against every other writer (which, with many
        // writers on one database, most would keep losing). Other processes are caught by
        // `apply`'s checks and `RetryingStorage`.
        let databases = changes.sequences.keys.sorted()
        let movedOn = await gates.enter(databases, after: changes.sequences)
        var applied: [Int64: Int64] = [:]
        do {
            // A writer of this process applied to one of the databases while this unit waited:
            // its apply would fail the sequence check, so it decides again at once, saving the
            // round trip of a doomed apply.
            if movedOn {
                (value, changes) = try await run(counting: writeRoundTrips) { unit in try body(unit) }
            }
            do {
                try await apply(changes)
            } catch StorageError.serializationFailure {
                (value, changes) = try await run(counting: writeRoundTrips) { unit in try body(unit) }
                try await apply(changes)
            }
            applied = changes.sequences.mapValues(\.final)
        } catch {
            await gates.leave(databases, at: [:])
            throw error
        }
        await gates.leave(databases, at: applied)
        return value
    }

    private func apply(_ changes: UnitOfWorkChanges) async throws {
        guard !changes.isEmpty else { return }
        writeRoundTrips.add(1, ordering: .relaxed)
        try await base.apply(changes)
    }

    public var accounts: any AccountStore { base.accounts }
    public var push: any PushStore { base.push }
    public var assets: any AssetStore { base.assets }
    public var shares: any ShareStore { base.shares }
    public var operations: any OperationOutcomeStore { base.operations }
    public var operators: any OperatorStore { base.operators }
    public func close() async throws { try await base.close() }
    public func signals() -> AsyncStream<StoreSignal>? { base.signals() }

    /// Runs `body` until it no longer misses anything.
    private func run<Value>(counting roundTrips: borrowing Atomic<Int>, _ body: (UnitOfWork) throws -> Value) async throws
        -> (value: Value, changes: UnitOfWorkChanges)
    {
        var loaded = LoadedRows()
        var lastMiss: UnitOfWork.Miss?
        for _ in 0..<Self.loadsPerUnit {
            let unit = UnitOfWork(loaded: loaded, ids: ids)
            var miss: UnitOfWork.Miss
            do {
                let value = try body(unit)
                guard !unit.missed.isEmpty else { return (value, unit.changes) }
                miss = UnitOfWork.Miss(keys: unit.missed)
            } catch let stopped as UnitOfWork.Miss {
                miss = stopped
            } catch {
                // A run that took missing rows for absent may fail for that alone.
                guard !unit.missed.isEmpty else { throw error }
                miss = UnitOfWork.Miss(keys: unit.missed)
            }
            lastMiss = miss
            if let kind = miss.ids {
                roundTrips.add(1, ordering: .relaxed)
                ids.add(kind, try await base.reserveIDs(kind, count: ids.block))
            }
            var request = LoadRequest(keys: miss.keys)
            if let scan = miss.scan { request.scans[scan.key] = scan }
            if !request.keys.isEmpty || !request.scans.isEmpty {
                roundTrips.add(1, ordering: .relaxed)
                loaded.merge(try await base.load(request))
            }
        }
        throw StorageError.corrupt("a unit of work still needed more rows after \(Self.loadsPerUnit) loads, last \(lastMiss.map { "\($0)" } ?? "none")")
    }
}

/// Storage ids reserved from the engine, handed out one at a time to units of work.
final class StorageIDReserve: Sendable {
    let block: Int
    private let free = Mutex<[StorageIDKind: [ClosedRange<Int64>]]>([:])

    init(block: Int) { self.block = block }

    func take(_ kind: StorageIDKind) -> Int64? {
        free.withLock { free in
            guard var ranges = free[kind], let first = ranges.first else { return nil }
            let id = first.lowerBound
            if first.lowerBound == first.upperBound { ranges.removeFirst() } else { ranges[0] = (id + 1)...first.upperBound }
            free[kind] = ranges
            return id
        }
    }

    func add(_ kind: StorageIDKind, _ range: ClosedRange<Int64>) {
        free.withLock { $0[kind, default: []].append(range) }
    }
}

/// One writer at a time per database, in this process, in the order they came; and, while
/// writers wait for a database, the sequence the last of them applied left it at.
actor DatabaseGates {
    private var held: Set<Int64> = []
    private var waiting: [Int64: [CheckedContinuation<Void, Never>]] = [:]
    /// Kept only while someone waits (a database nobody waits for needs no memory of it), so
    /// the map stays as small as the queues.
    private var heads: [Int64: Int64] = [:]

    /// Takes every gate, in id order (so two writers of the same databases never wait on
    /// each other crosswise); returns whether a writer of this process left one of them past
    /// the sequence the unit read from it (`sequences`).
    func enter(_ databases: [Int64], after sequences: [Int64: (read: Int64, final: Int64)]) async -> Bool {
        for id in databases {
            while held.contains(id) {
                await withCheckedContinuation { waiting[id, default: []].append($0) }
            }
            held.insert(id)
        }
        return sequences.contains { id, sequence in heads[id].map { $0 > sequence.read } ?? false }
    }

    /// Releases the gates; `applied` holds the sequences the holder's apply left.
    func leave(_ databases: [Int64], at applied: [Int64: Int64]) {
        for id in databases {
            held.remove(id)
            if var queue = waiting[id], !queue.isEmpty {
                if let sequence = applied[id] { heads[id] = max(heads[id] ?? sequence, sequence) }
                let next = queue.removeFirst()
                waiting[id] = queue.isEmpty ? nil : queue
                next.resume()
            } else {
                heads[id] = nil
            }
        }
    }
}
