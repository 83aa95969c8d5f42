import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import _NIOFileSystem
import NIOHTTP1

/// One S3-compatible bucket under a key prefix, spoken to with AWS Signature Version 4 over
/// path-style URLs (MinIO, Garage, Ceph and AWS itself all take them): the objects the asset
/// store (`S3BlobStore`) and the server's backups (`BackupKeeper`) keep there. Keys given here
/// are below `Location.prefix`.
public struct S3Bucket: Sendable {
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

        /// The same bucket, deeper: `child` (ending in `/`) added to the prefix.
        public func below(_ child: String) -> Location {
            var location = self
            location.prefix += child.hasSuffix("/") ? child : child + "/"
            return location
        }

        /// Where it is, without the credentials: for logs and pages.
        public var description: String { "\(endpoint)/\(bucket)/\(prefix)" }
    }

    public let location: Location
    private let client: HTTPClient

    public init(_ location: Location, client: HTTPClient = .shared) {
        self.location = location
        self.client = client
    }

    /// Makes the bucket when it is not there (a fresh MinIO, the tests' moto).
    public func createIfMissing() async throws {
        let head = try await send(.HEAD, path: "/\(location.bucket)")
        guard head.status == .notFound else { return }
        let made = try await send(.PUT, path: "/\(location.bucket)")
        guard (200..<300).contains(Int(made.status.code)) || made.status == .conflict else {
            throw BlobStoreError.unavailable("creating bucket \(location.bucket) answered \(made.status.code): \(made.text)")
        }
    }

    private func objectPath(_ key: String) -> String { "/\(location.bucket)/\(location.prefix)\(key)" }

    /// Stores a file's bytes as `key`; `sha256` is their SHA-256 in hex (what the signature covers).
    public func put(file: FilePath, as key: String, sha256: String) async throws {
        guard let info = try await FileSystem.shared.info(forFileAt: file) else {
            throw BlobStoreError.unavailable("\(file) is gone")
        }
        let answer = try await FileSystem.shared.withFileHandle(forReadingAt: file) { handle in
            try await send(
                .PUT, path: objectPath(key), payloadHash: sha256,
                body: .stream(handle.readChunks(chunkLength: .kibibytes(256)), length: .known(info.size)))
        }
        guard answer.status == .ok else {
            throw BlobStoreError.unavailable("storing \(location.prefix)\(key) answered \(answer.status.code): \(answer.text)")
        }
    }

    /// Stores bytes held in memory as `key`.
    public func put(_ bytes: [UInt8], as key: String) async throws {
        let answer = try await send(
            .PUT, path: objectPath(key), payloadHash: Self.hex(Array(SHA256.hash(data: bytes))), body: .bytes(ByteBuffer(bytes: bytes)))
        guard answer.status == .ok else {
            throw BlobStoreError.unavailable("storing \(location.prefix)\(key) answered \(answer.status.code): \(answer.text)")
        }
    }

    /// Sends the object's bytes in `range` (all when nil) to `write`, a chunk at a time; nil when
    /// there is no such object.
    public func read(_ key: String, range: Range<Int64>? = nil, into write: (ByteBuffer) async throws -> Void) async throws -> Bool {
        var headers: [(String, String)] = []
        if let range { headers.append(("range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")) }
        let request = try signed(.GET, path: objectPath(key), query: [], headers: headers, payloadHash: Self.emptyHash)
        let response = try await client.execute(request, timeout: .seconds(300))
        switch response.status {
        case .ok, .partialContent:
            for try await chunk in response.body { try await write(chunk) }
            return true
        case .notFound:
            return false
        default:
            let text = String(buffer: try await response.body.collect(upTo: 64 * 1024))
            throw BlobStoreError.unavailable("reading \(location.prefix)\(key) answered \(response.status.code): \(text)")
        }
    }

    /// Removes an object; removing one that is not there is not an error.
    public func delete(_ key: String) async throws {
        let answer = try await send(.DELETE, path: objectPath(key))
        guard (200..<300).contains(Int(answer.status.code)) || answer.status == .notFound else {
            throw BlobStoreError.unavailable("deleting \(location.prefix)\(key) answered \(answer.status.code): \(answer.text)")
        }
    }

    /// Every object below the prefix: its key (below the prefix) and last-modified time
    /// (milliseconds since 1970), page after page.
    public func list() async throws -> [(key: String, modified: Int64?)] {
        var objects: [(key: String, modified: Int64?)] = []
        var continuation: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", location.prefix)]
            if let continuation { query.append(("continuation-token", continuation)) }
            let answer = try await send(.GET, path: "/\(location.bucket)", query: query)
            guard answer.status == .ok else {
                throw BlobStoreError.unavailable("listing \(location.bucket) answered \(answer.status.code): \(answer.text)")
            }
            let listing = ListingPage(answer.text)
            for (name, modified) in listing.objects where name.hasPrefix(location.prefix) {
                objects.append((String(name.dropFirst(location.prefix.count)), modified))
            }
            continuation = listing.nextContinuationToken
        } while continuation != nil
        return objects
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
