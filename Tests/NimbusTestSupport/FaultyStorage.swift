import Foundation
import NimbusStorage

/// A driver that fails on purpose: wraps a real one and throws the errors it is told to, in
/// order, instead of running the next transactions. Storage faults no machine here produces
/// on demand (a serialization failure, a store that goes away) are injected through it.
public final class FaultyStorage: WrappingStorageDriver, @unchecked Sendable {
    public let base: any StorageDriver
    private let lock = NSLock()
    private var writeFaults: [StorageError] = []
    private var scanFaults: [StorageError] = []
    private var writesRun = 0
    private var holding = false
    private var held: [CheckedContinuation<Void, Never>] = []

    public init(_ base: any StorageDriver) {
        self.base = base
    }

    /// The next writes (scans: queries, change feeds) throw these, one each, without running.
    /// Point reads are never failed: a server's background tasks make them at any moment.
    public func failWrites(_ errors: [StorageError]) { lock.withLock { writeFaults += errors } }
    public func failScans(_ errors: [StorageError]) { lock.withLock { scanFaults += errors } }

    /// From now on, writes wait (before they run) until `releaseWrites`: a store that has
    /// stopped answering, for tests of what piles up meanwhile.
    public func holdWrites() { lock.withLock { holding = true } }

    public func releaseWrites() {
        let waiting = lock.withLock {
            holding = false
            defer { held = [] }
            return held
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Holds writes while `body` runs, and releases them however it ends. A test that throws
    /// with writes held would otherwise never end: its server's shutdown waits for the
    /// requests those writes belong to. (`body` may release them earlier itself.)
    public func holdingWrites<Value>(_ body: () async throws -> Value) async throws -> Value {
        holdWrites()
        defer { releaseWrites() }
        return try await body()
    }

    /// Writes waiting in `holdWrites`.
    public var heldWrites: Int { lock.withLock { held.count } }

    /// Write transactions handed to the real driver so far.
    public var writesRunCount: Int { lock.withLock { writesRun } }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value
    {
        if kind.size == .scan, let fault = lock.withLock({ scanFaults.isEmpty ? nil : scanFaults.removeFirst() }) { throw fault }
        return try await base.read(kind, body)
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        let fault = lock.withLock { () -> StorageError? in
            if writeFaults.isEmpty {
                writesRun += 1
                return nil
            }
            return writeFaults.removeFirst()
        }
        if let fault { throw fault }
        await withCheckedContinuation { continuation in
            let hold = lock.withLock {
                if holding { held.append(continuation) }
                return holding
            }
            if !hold { continuation.resume() }
        }
        return try await base.write(body)
    }

    public var wrapped: any StorageDriver { base }

    public func close() async throws { try await base.close() }
}
