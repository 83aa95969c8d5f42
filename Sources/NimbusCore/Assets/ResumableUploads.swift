import Crypto
import Foundation

/// Resumable uploads this node is receiving or has kept part of (docs/assets.md, "Resumable
/// uploads"): which are being received now (one request at a time per upload URL), and the
/// SHA-256 state of the bytes kept so far, so the next piece goes on hashing where the last
/// stopped instead of reading them back. A state lost (a restart, or more kept uploads than
/// `capacity`) costs one read of the kept bytes, nothing else.
final class ResumableUploads: @unchecked Sendable {
    struct Kept {
        var hasher: SHA256
        var size: Int64
        /// When the upload URL expires (milliseconds since 1970): nothing can resume it later.
        var expiresAt: Int64
    }

    private let lock = NSLock()
    private var receiving: Set<String> = []
    private var kept: [String: Kept] = [:]
    private let capacity: Int

    init(capacity: Int = 10_000) { self.capacity = capacity }

    /// Marks the upload `nonce` as being received; false when another request is receiving it.
    func begin(_ nonce: String) -> Bool {
        lock.withLock { receiving.insert(nonce).inserted }
    }

    func end(_ nonce: String) {
        _ = lock.withLock { receiving.remove(nonce) }
    }

    /// The hashing state of the kept bytes, when it is the state of exactly `size` of them.
    func hashed(_ nonce: String, size: Int64) -> SHA256? {
        lock.withLock { kept[nonce].flatMap { $0.size == size ? $0.hasher : nil } }
    }

    func keep(_ nonce: String, _ state: Kept, now: Int64) {
        lock.withLock {
            if kept.count >= capacity { kept = kept.filter { $0.value.expiresAt > now } }
            if kept.count < capacity { kept[nonce] = state }
        }
    }

    func forget(_ nonce: String) {
        _ = lock.withLock { kept.removeValue(forKey: nonce) }
    }
}
