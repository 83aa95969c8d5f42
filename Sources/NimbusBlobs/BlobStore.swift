import NIOCore

/// Where asset bytes live: whole blobs under keys Nimbus makes (`BlobKey`), written once and
/// never changed, read whole or in ranges. The registry of which blob holds which checksum of
/// which container, and which records hold it, is the storage driver's (`AssetStore`); a blob
/// store only keeps bytes. docs/assets.md.
///
/// Writing is staged: bytes are appended to a `StagedBlob` as they arrive, and only `store(as:)`
/// makes them a blob, durably and all at once. A crash or a refusal before then leaves nothing
/// under any key (the staging area is emptied at start).
public protocol BlobStore: Sendable {
    /// A new, empty staging area for one upload.
    func stage() async throws -> any StagedBlob
    /// The staging area of a resumable upload named `name` (letters, digits and '-'): the
    /// bytes an earlier request for it kept (`StagedBlob.keep()`), or a new, empty one.
    /// Appends go after what is there.
    func stage(resumable name: String) async throws -> any StagedBlob
    /// How many bytes a resumable upload named `name` has kept; nil when none are kept.
    func stagedSize(resumable name: String) async throws -> Int64?
    /// Removes staging areas last written before `time` (milliseconds since 1970): uploads a
    /// stopped process or a client that never came back left behind.
    func removeStaging(untouchedSince time: Int64) async throws
    /// Sends the blob's bytes in `range` (all of it when nil) to `write`, a chunk at a time, so
    /// no blob is ever held whole in memory. Throws `BlobStoreError.notFound` when there is no
    /// such blob.
    func read(_ key: BlobKey, range: Range<Int64>?, into write: (ByteBuffer) async throws -> Void) async throws
    /// Removes a blob; removing one that is not there is not an error.
    func delete(_ key: BlobKey) async throws
    /// The keys of blobs stored at or before `time` (milliseconds since 1970): what the
    /// collector compares with the registry to find blobs a crash stored but never registered.
    func keys(storedBefore time: Int64) async throws -> [BlobKey]
    /// Where it keeps bytes, for logs and `nimbus assets stats`.
    var description: String { get }
}

/// One upload's bytes on their way into a `BlobStore`.
public protocol StagedBlob: Sendable {
    func append(_ chunk: ByteBuffer) async throws
    /// Makes the bytes the blob `key`, durably (on the filesystem: fsync, rename, fsync of the
    /// directory); the staging area is gone afterwards.
    func store(as key: BlobKey) async throws
    /// Drops the bytes (a refused or broken upload); never throws, safe to call twice.
    func discard() async
    /// Writes what arrived and closes, keeping the bytes for the next `stage(resumable:)` of
    /// the same name (a resumable upload whose connection broke); a staging area that is not
    /// resumable is discarded. Never throws.
    func keep() async
    /// The bytes staged so far, `size` of them: a resumed upload hashes what an earlier
    /// request sent before it adds its own.
    var size: Int64 { get }
    func readStaged(into read: (ByteBuffer) async throws -> Void) async throws
}

/// A blob's name in its store: the hex SHA-256 of its bytes and a random generation, so bytes
/// collected and uploaded again get a new name and a collection of the old blob can never
/// remove the new one (docs/assets.md). Only these characters reach a path or an object key.
public struct BlobKey: Sendable, Hashable, CustomStringConvertible {
    public let text: String

    /// `nil` unless `text` is 64 lowercase hex digits, '-', 16 lowercase hex digits.
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 81, bytes[64] == UInt8(ascii: "-") else { return nil }
        func isHex(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) }
        guard bytes[..<64].allSatisfy(isHex), bytes[65...].allSatisfy(isHex) else { return nil }
        self.text = text
    }

    /// A new key for bytes whose SHA-256 is `sha256Hex`.
    public static func make(sha256Hex: String) -> BlobKey {
        var generator = SystemRandomNumberGenerator()
        let generation = String(generator.next() as UInt64, radix: 16)
        let padded = String(repeating: "0", count: 16 - generation.count) + generation
        guard let key = BlobKey("\(sha256Hex)-\(padded)") else { preconditionFailure("not a SHA-256 in hex: \(sha256Hex)") }
        return key
    }

    public var description: String { text }
}

public enum BlobStoreError: Error, Sendable, CustomStringConvertible {
    case notFound(BlobKey)
    /// The store could not be reached or refused the request; `detail` says how.
    case unavailable(String)
    /// A resumable upload's name with characters other than letters, digits and '-'.
    case badName(String)

    public var description: String {
        switch self {
        case .notFound(let key): "no blob \(key)"
        case .unavailable(let detail): "the blob store is unavailable: \(detail)"
        case .badName(let name): "\(name.debugDescription) cannot name a resumable upload"
        }
    }
}
