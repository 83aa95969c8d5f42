import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NimbusBlobs
import NimbusCore
import NimbusWire

/// Assets (docs/assets.md). Under `/database/1/{container}/{environment}/{database}/`:
///
/// | path | service |
/// |---|---|
/// | `assets/upload` | `requestAssetUploads`: upload URLs |
/// | `assets/rereference` | `rereferenceAssets` |
///
/// and at the root, where the URLs handed out point (no CloudKit credentials: the signed
/// token in the path is the capability):
///
/// | path | answer |
/// |---|---|
/// | `POST assets/1/upload/{token}` | the file's bytes in, `{"singleFile": …}` out; or a resumable upload's piece (`Upload-Offset`, `Upload-Complete`) |
/// | `HEAD assets/1/upload/{token}` | `Upload-Offset`: the bytes of a resumable upload the server holds |
/// | `GET`/`HEAD assets/1/download/{token}/{name}` | the bytes, with `Range`, `ETag` and `If-None-Match` |
enum AssetRoutes {
    static let routes: [Route] = [
        .json("assets/upload") { try await $0.service.requestAssetUploads($0.target, AssetUploadRequest(json: $0.body())) },
        .json("assets/rereference") { try await $0.service.rereferenceAssets($0.target, AssetRereferenceRequest(json: $0.body())) },
    ]

    static func addTransfers(to router: MethodRecordingRouter, parts: ServerParts) {
        router.post("assets/1/upload/:token") { request, context in
            try await upload(request, context: context, service: parts.service)
        }
        router.head("assets/1/upload/:token") { _, context in
            try await uploadOffset(context: context, service: parts.service)
        }
        router.get("assets/1/download/:token/:name") { request, context in
            try await download(request, context: context, service: parts.service, withBody: true)
        }
        router.head("assets/1/download/:token/:name") { request, context in
            try await download(request, context: context, service: parts.service, withBody: false)
        }
    }

    private static let contentDigestHeader = HTTPField.Name("Content-Digest")!
    private static let uploadOffsetHeader = HTTPField.Name(ResumableUploadHeader.offset)!
    private static let uploadCompleteHeader = HTTPField.Name(ResumableUploadHeader.complete)!
    private static let uploadLengthHeader = HTTPField.Name(ResumableUploadHeader.length)!

    private static func upload(_ request: Request, context: NimbusRequestContext, service: NimbusService) async throws -> Response {
        let token = context.parameter("token") ?? ""
        let length = request.headers[.contentLength].flatMap { Int64($0) }
        let digest = try request.headers[contentDigestHeader].map(sha256Digest) ?? nil
        var piece = NimbusService.UploadPiece()
        if let text = request.headers[uploadCompleteHeader] {
            guard let complete = ResumableUploadHeader.boolean(text) else {
                throw CloudKitError.badRequest("Upload-Complete is ?1 (this is the file's last piece) or ?0 (more follow), not \(text.debugDescription)")
            }
            piece.resumable = true
            piece.complete = complete
        }
        if let text = request.headers[uploadOffsetHeader] {
            guard let offset = Int64(text.trimmingCharacters(in: .whitespaces)), offset >= 0 else {
                throw CloudKitError.badRequest("Upload-Offset is a whole number of bytes, not \(text.debugDescription)")
            }
            piece.offset = offset
        }
        switch try await service.receiveAssetUpload(grant: token, contentLength: length, digest: digest, piece: piece, body: request.body) {
        case .stored(let result):
            return Reply.json(result.json, context: context)
        case .kept(let bytes):
            var headers = Reply.headers(context)
            headers[uploadOffsetHeader] = String(bytes)
            return Response(status: .noContent, headers: headers)
        }
    }

    /// A resumable upload's bytes the server holds: where the next piece starts.
    private static func uploadOffset(context: NimbusRequestContext, service: NimbusService) async throws -> Response {
        let (held, size) = try await service.uploadOffset(grant: context.parameter("token") ?? "")
        var headers = Reply.headers(context)
        headers[uploadOffsetHeader] = String(held)
        if let size { headers[uploadLengthHeader] = String(size) }
        headers[.cacheControl] = "no-store"
        return Response(status: .noContent, headers: headers)
    }

    /// The SHA-256 a `Content-Digest` header names (RFC 9530: `sha-256=:base64:`); other
    /// algorithms are ignored, a malformed SHA-256 entry refused.
    private static func sha256Digest(_ header: String) throws -> [UInt8]? {
        for entry in header.split(separator: ",") {
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "sha-256" else { continue }
            let value = parts[1].trimmingCharacters(in: .whitespaces)
            guard value.count > 2, value.hasPrefix(":"), value.hasSuffix(":"),
                let bytes = Data(base64Encoded: String(value.dropFirst().dropLast())), bytes.count == 32
            else {
                throw CloudKitError.badRequest("Content-Digest: the sha-256 entry must be 32 bytes in base64 between colons")
            }
            return Array(bytes)
        }
        return nil
    }

    private static func download(
        _ request: Request, context: NimbusRequestContext, service: NimbusService, withBody: Bool
    ) async throws -> Response {
        let (blob, store) = try await service.openAssetDownload(context.parameter("token") ?? "")
        guard let key = BlobKey(blob.key) else {
            throw CloudKitError(.internalError, "the registry names blob '\(blob.key)', which is not a blob key")
        }
        var headers = Reply.headers(context)
        // The checksum names the bytes: the same tag whichever URL reached them.
        let etag = "\"\(blob.checksum)\""
        headers[.eTag] = etag
        headers[.acceptRanges] = "bytes"
        headers[.cacheControl] = "private, max-age=3600, immutable"
        if let match = request.headers[.ifNoneMatch], match.split(separator: ",").contains(where: {
            let tag = $0.trimmingCharacters(in: .whitespaces)
            return tag == etag || tag == "*" || tag == "W/\(etag)"
        }) {
            return Response(status: .notModified, headers: headers)
        }
        var status = HTTPResponse.Status.ok
        var range: Range<Int64>?
        if let header = request.headers[.range] {
            switch ByteRange.parse(header, size: blob.size) {
            case .whole: break
            case .part(let part):
                status = .partialContent
                range = part
                headers[.contentRange] = "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(blob.size)"
            case .unsatisfiable:
                headers[.contentRange] = "bytes */\(blob.size)"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            }
        }
        let length = range.map { $0.count } ?? Int(blob.size)
        headers[.contentType] = "application/octet-stream"
        headers[.contentLength] = String(length)
        guard withBody, length > 0 else { return Response(status: status, headers: headers) }
        let wanted = range
        let body = ResponseBody(contentLength: length) { writer in
            try await store.read(key, range: wanted) { chunk in try await writer.write(chunk) }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }
}

/// One `Range: bytes=…` request over a blob of `size` bytes (RFC 9110 §14.2). Several ranges
/// and other units are answered whole, as the RFC allows.
enum ByteRange: Equatable {
    case whole
    case part(Range<Int64>)
    case unsatisfiable

    static func parse(_ header: String, size: Int64) -> ByteRange {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .whole }
        let spec = trimmed.dropFirst("bytes=".count)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            // The last N bytes.
            guard let suffix = Int64(last), suffix > 0 else { return .unsatisfiable }
            return size == 0 ? .unsatisfiable : .part(max(0, size - suffix)..<size)
        }
        guard let start = Int64(first), start >= 0 else { return .whole }
        guard start < size else { return .unsatisfiable }
        if last.isEmpty { return .part(start..<size) }
        guard let end = Int64(last), end >= start else { return .whole }
        return .part(start..<min(end + 1, size))
    }
}
