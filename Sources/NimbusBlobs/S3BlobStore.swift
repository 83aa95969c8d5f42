import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import _NIOFileSystem

/// Blobs as objects in an S3-compatible bucket (AWS S3, MinIO, Ceph, moto), addressed by path
/// (`<endpoint>/<bucket>/<prefix><key>`) and signed with AWS Signature Version 4. Uploads are
/// staged in a local directory first (the upload's SHA-256 is known only at its end, and S3
/// wants the length up front), then PUT whole, their hash in the signature, so S3 itself
/// refuses bytes that changed on the way. An object is never visible half-written.
public struct S3BlobStore: BlobStore {
    public struct Location: Sendable, Hashable {
        /// `http(s)://host:port`, no path.
        public var endpoint: String
        public var bucket: String
        public var region: String
        public var accessKeyID: String
        public var secretAccessKey: String
        /// Put before every key (`nimbus/`), so a bucket can hold other things.
        public var prefix: String

        public init(endpoint: String, bucket: String, region: String, accessKeyID: String, secretAccessKey: String, prefix: String = "")
        {
            self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
            self.bucket = bucket
            self.region = region
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.prefix = prefix
        }
    }

    public let location: Location
    private let staging: FileBlobStore
    private let client: HTTPClient

    /// `stagingRoot`: a local directory for uploads in flight (`FileBlobStore`'s staging).
    public static func open(_ location: Location, stagingRoot: String, client: HTTPClient = .shared) async throws -> S3BlobStore {
        S3BlobStore(location: location, staging: try await FileBlobStore.open(root: stagingRoot), client: client)
    }

    private init(location: Location, staging: FileBlobStore, client: HTTPClient) {
        self.location = location
        self.staging = staging
        self.client = client
    }

    public var description: String { "S3 bucket \(location.bucket) at \(location.endpoint)" }

    /// Makes the bucket when it is not there (a fresh MinIO, the tests' moto).
    public func createBucketIfMissing() async throws {
        let head = try await send(.HEAD, path: "/\(location.bucket)")
        guard head.status == .notFound else { return }
        let made = try await send(.PUT, path: "/\(location.bucket)")
        guard (200..<300).contains(Int(made.status.code)) || made.status == .conflict else {
            throw BlobStoreError.unavailable("creating bucket \(location.bucket) answered \(made.status.code): \(made.text)")
        }
    }

    private func objectPath(_ key: BlobKey) -> String { "/\(location.bucket)/\(location.prefix)\(key.text)" }

    public func stage() async throws -> any StagedBlob {
        try await staging.stage { file, key in try await self.put(file, as: key) }
    }

    private func put(_ file: FilePath, as key: BlobKey) async throws {
        guard let info = try await FileSystem.shared.info(forFileAt: file) else {
            throw BlobStoreError.unavailable("the staged upload \(file) is gone")
        }
        // The key begins with the bytes' SHA-256 in hex: what the signature covers.
        let hash = String(key.text.prefix(64))
        let answer = try await FileSystem.shared.withFileHandle(forReadingAt: file) { handle in
            try await send(
                .PUT, path: objectPath(key), payloadHash: hash,
                body: .stream(handle.readChunks(chunkLength: .kibibytes(256)), length: .known(info.size)))
        }
        guard answer.status == .ok else {
            throw BlobStoreError.unavailable("storing \(key) answered \(answer.status.code): \(answer.text)")
        }
    }

    public func read(_ key: BlobKey, range: Range<Int64>?, into write: (ByteBuffer) async throws -> Void) async throws {
        var headers: [(String, String)] = []
        if let range { headers.append(("range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")) }
        let request = try signed(.GET, path: objectPath(key), query: [], headers: headers, payloadHash: Self.emptyHash)
        let response = try await client.execute(request, timeout: .seconds(300))
        switch response.status {
        case .ok, .partialContent:
            for try await chunk in response.body { try await write(chunk) }
        case .notFound:
            throw BlobStoreError.notFound(key)
        default:
            let text = String(buffer: try await response.body.collect(upTo: 64 * 1024))
            throw BlobStoreError.unavailable("reading \(key) answered \(response.status.code): \(text)")
        }
    }

    public func delete(_ key: BlobKey) async throws {
        let answer = try await send(.DELETE, path: objectPath(key))
        guard (200..<300).contains(Int(answer.status.code)) || answer.status == .notFound else {
            throw BlobStoreError.unavailable("deleting \(key) answered \(answer.status.code): \(answer.text)")
        }
    }

    public func keys(storedBefore time: Int64) async throws -> [BlobKey] {
        var keys: [BlobKey] = []
        var continuation: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", location.prefix)]
            if let continuation { query.append(("continuation-token", continuation)) }
            let answer = try await send(.GET, path: "/\(location.bucket)", query: query)
            guard answer.status == .ok else {
                throw BlobStoreError.unavailable("listing \(location.bucket) answered \(answer.status.code): \(answer.text)")
            }
            let listing = ListingPage(answer.text)
            for (name, modified) in listing.objects {
                guard name.hasPrefix(location.prefix), let key = BlobKey(String(name.dropFirst(location.prefix.count))),
                    let modified, modified <= time
                else { continue }
                keys.append(key)
            }
            continuation = listing.nextContinuationToken
        } while continuation != nil
        return keys
    }

    // MARK: Requests and their signatures

    private struct Answer {
        let status: HTTPResponseStatus
        let text: String
    }

    private static let emptyHash = Self.hex(Array(SHA256.hash(data: [UInt8]())))

    private func send(
        _ method: HTTPMethod, path: String, query: [(String, String)] = [], payloadHash: String = Self.emptyHash,
        body: HTTPClientRequest.Body? = nil
    ) async throws -> Answer {
        var request = try signed(method, path: path, query: query, headers: [], payloadHash: payloadHash)
        request.body = body
        let response = try await client.execute(request, timeout: .seconds(300))
        let text = String(buffer: try await response.body.collect(upTo: 16 * 1_048_576))
        return Answer(status: response.status, text: text)
    }

    /// A request with AWS Signature Version 4 (the `Authorization` header form).
    private func signed(
        _ method: HTTPMethod, path: String, query: [(String, String)], headers extra: [(String, String)], payloadHash: String,
        now: Date = Date()
    ) throws -> HTTPClientRequest {
        guard let host = URL(string: location.endpoint).flatMap({ url in url.host.map { host in url.port.map { "\(host):\($0)" } ?? host } })
        else { throw BlobStoreError.unavailable("the S3 endpoint \(location.endpoint) is not a URL") }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let amzDate = formatter.string(from: now)
        let day = String(amzDate.prefix(8))
        let canonicalPath = path.split(separator: "/", omittingEmptySubsequences: false).map { Self.encode(String($0)) }
            .joined(separator: "/")
        let canonicalQuery = query.map { (Self.encode($0.0), Self.encode($0.1)) }.sorted { $0 < $1 }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        var headers = [("host", host), ("x-amz-content-sha256", payloadHash), ("x-amz-date", amzDate)] + extra
        headers.sort { $0.0 < $1.0 }
        let signedHeaders = headers.map(\.0).joined(separator: ";")
        let canonicalRequest = [
            method.rawValue, canonicalPath, canonicalQuery, headers.map { "\($0.0):\($0.1)\n" }.joined(), signedHeaders, payloadHash,
        ].joined(separator: "\n")
        let scope = "\(day)/\(location.region)/s3/aws4_request"
        let stringToSign = [
            "AWS4-HMAC-SHA256", amzDate, scope, Self.hex(Array(SHA256.hash(data: Array(canonicalRequest.utf8)))),
        ].joined(separator: "\n")
        var key = SymmetricKey(data: Array("AWS4\(location.secretAccessKey)".utf8))
        for part in [day, location.region, "s3", "aws4_request"] {
            key = SymmetricKey(data: Array(HMAC<SHA256>.authenticationCode(for: Array(part.utf8), using: key)))
        }
        let signature = Self.hex(Array(HMAC<SHA256>.authenticationCode(for: Array(stringToSign.utf8), using: key)))

        var request = HTTPClientRequest(url: location.endpoint + canonicalPath + (canonicalQuery.isEmpty ? "" : "?" + canonicalQuery))
        request.method = method
        for (name, value) in headers where name != "host" { request.headers.add(name: name, value: value) }
        request.headers.add(
            name: "Authorization",
            value: "AWS4-HMAC-SHA256 Credential=\(location.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)")
        return request
    }

    /// RFC 3986 unreserved characters as they are, everything else percent-encoded (SigV4's rule).
    private static func encode(_ text: String) -> String {
        var output = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += String(format: "%%%02X", byte)
            }
        }
        return output
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}

/// One page of a ListObjectsV2 answer: each object's key and last-modified time (milliseconds
/// since 1970), and the token for the next page. The XML is S3's fixed shape; only these
/// elements are read.
struct ListingPage {
    var objects: [(key: String, modified: Int64?)] = []
    var nextContinuationToken: String?

    init(_ xml: String) {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        for contents in Self.elements("Contents", in: xml) {
            guard let key = Self.elements("Key", in: contents).first else { continue }
            let modified = Self.elements("LastModified", in: contents).first.flatMap { formatter.date(from: $0) ?? plain.date(from: $0) }
            objects.append((Self.unescaped(key), modified.map { Int64($0.timeIntervalSince1970 * 1000) }))
        }
        if Self.elements("IsTruncated", in: xml).first == "true" {
            nextContinuationToken = Self.elements("NextContinuationToken", in: xml).first.map(Self.unescaped)
        }
    }

    private static func elements(_ name: String, in xml: String) -> [String] {
        var found: [String] = []
        var rest = xml[...]
        while let open = rest.range(of: "<\(name)>"), let close = rest[open.upperBound...].range(of: "</\(name)>") {
            found.append(String(rest[open.upperBound..<close.lowerBound]))
            rest = rest[close.upperBound...]
        }
        return found
    }

    private static func unescaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }
}
