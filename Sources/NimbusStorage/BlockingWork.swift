import Foundation

/// Work that blocks its thread for long (copying or hashing a whole store, waiting for a child
/// process), run on a thread of its own: Swift's cooperative pool has a thread per core, and
/// one held by such work holds up every request the server is answering.
public enum BlockingWork {
    public static func run<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try work() }) }.start()
        }
    }
}
