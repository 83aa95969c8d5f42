import AsyncHTTPClient
import Foundation
import NIOCore
import _NIOFileSystem

/// Blobs as objects in an S3-compatible bucket (AWS S3, MinIO, Ceph, moto; `S3Bucket` speaks to
/// it), addressed by path (`<endpoint>/<bucket>/<prefix><key>`). Uploads are
/// staged in a local directory first (the upload's SHA-256 is known only at its end, and S3
/// wants the length up front), then PUT whole, their hash in the signature, so S3 itself
/// refuses bytes that changed on the way. An object is never visible half-written.
public struct S3BlobStore: BlobStore {
    public typealias Location = S3Bucket.Location

    public let bucket: S3Bucket
    public var location: Location { bucket.location }
    private let staging: FileBlobStore

    /// `stagingRoot`: a local directory for uploads in flight (`FileBlobStore`'s staging).
    public static func open(_ location: Location, stagingRoot: String, client: HTTPClient = .shared) async throws -> S3BlobStore {
        S3BlobStore(bucket: S3Bucket(location, client: client), staging: try await FileBlobStore.open(root: stagingRoot))
    }

    private init(bucket: S3Bucket, staging: FileBlobStore) {
        self.bucket = bucket
        self.staging = staging
    }

    public var description: String { "S3 bucket \(location.bucket) at \(location.endpoint)" }

    /// Makes the bucket when it is not there (a fresh MinIO, the tests' moto).
    public func createBucketIfMissing() async throws { try await bucket.createIfMissing() }

    public func stage() async throws -> any StagedBlob {
        try await staging.stage(resumable: nil) { file, key in try await self.put(file, as: key) }
    }

    public func stage(resumable name: String) async throws -> any StagedBlob {
        try await staging.stage(resumable: name) { file, key in try await self.put(file, as: key) }
    }

    public func stagedSize(resumable name: String) async throws -> Int64? { try await staging.stagedSize(resumable: name) }

    public func removeStaging(untouchedSince time: Int64) async throws { try await staging.removeStaging(untouchedSince: time) }

    /// Sends a whole staged file to the bucket. The key begins with the bytes' SHA-256 in hex:
    /// what the signature covers.
    private func put(_ file: FilePath, as key: BlobKey) async throws {
        try await bucket.put(file: file, as: key.text, sha256: String(key.text.prefix(64)))
    }

    public func read(_ key: BlobKey, range: Range<Int64>?, into write: (ByteBuffer) async throws -> Void) async throws {
        guard try await bucket.read(key.text, range: range, into: write) else { throw BlobStoreError.notFound(key) }
    }

    public func delete(_ key: BlobKey) async throws { try await bucket.delete(key.text) }

    public func keys(storedBefore time: Int64) async throws -> [BlobKey] {
        try await bucket.list().compactMap { object in
            guard let key = BlobKey(object.key), let modified = object.modified, modified <= time else { return nil }
            return key
        }
    }
}
