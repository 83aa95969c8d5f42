import Foundation

/// Assets on the wire (reference §7): asking for upload URLs, the upload's answer, and
/// `assets/rereference`. The asset dictionary itself is `Asset` (FieldValue.swift).

/// `assets/upload`: one upload URL per token.
public struct AssetUploadRequest: WireBody {
    public struct Token: Sendable, Hashable {
        public var recordType: String
        public var fieldName: String
        /// The record the asset is for; the server picks one (a UUID) when absent.
        public var recordName: String?
        /// The size the client means to upload, when it says (CKTool's newer call does): a
        /// larger body is refused, and a size over the limit is refused at once.
        public var size: Int64?
        /// Nimbus's addition: the SHA-256 (base64) of the file, with its `size`. When the
        /// caller's own database already holds those bytes, the answer's token carries a
        /// receipt (`singleFile`) and the file need not be sent again. docs/assets.md.
        public var fileChecksum: String?

        public init(
            recordType: String, fieldName: String, recordName: String? = nil, size: Int64? = nil, fileChecksum: String? = nil
        ) {
            self.recordType = recordType
            self.fieldName = fieldName
            self.recordName = recordName
            self.size = size
            self.fileChecksum = fileChecksum
        }
    }

    public var zoneID: WireZoneID
    public var tokens: [Token]

    public init(zoneID: WireZoneID = .defaultZone, tokens: [Token]) {
        self.zoneID = zoneID
        self.tokens = tokens
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        zoneID = try WireZoneID.orDefault(json)
        tokens = []
        for element in try json.requiredArray(WireKey.tokens, limit: Limits.assetTokensPerRequest, what: "the number of upload tokens") {
            let token = try element.object()
            let recordType = try token.requiredString(WireKey.recordType)
            try Names.validateIdentifier(recordType, kind: "record type", path: token.childPath(WireKey.recordType))
            let fieldName = try token.requiredString(WireKey.fieldName)
            try Names.validateIdentifier(fieldName, kind: "field name", path: token.childPath(WireKey.fieldName))
            let recordName = try token.string(WireKey.recordName)
            if let recordName { try Names.validateRecordName(recordName, path: token.childPath(WireKey.recordName)) }
            let size = try token.int(WireKey.size)
            if let size, size < 0 { throw .badRequest("\(token.childPath(WireKey.size)): a size cannot be negative") }
            let fileChecksum = try token.string(WireKey.fileChecksum)
            if let fileChecksum {
                guard size != nil else {
                    throw .badRequest("\(token.childPath(WireKey.fileChecksum)): a checksum needs the file's size beside it")
                }
                guard let digest = Data(base64Encoded: fileChecksum), digest.count == 32 else {
                    throw .badRequest("\(token.childPath(WireKey.fileChecksum)): not a SHA-256 in base64 (44 characters)")
                }
            }
            tokens.append(
                Token(recordType: recordType, fieldName: fieldName, recordName: recordName, size: size, fileChecksum: fileChecksum))
        }
    }

    public var json: JSON {
        [
            WireKey.zoneID: zoneID.json,
            WireKey.tokens: .array(
                tokens.map { token in
                    var object: JSONObject = [
                        WireKey.recordType: .string(token.recordType), WireKey.fieldName: .string(token.fieldName),
                    ]
                    if let recordName = token.recordName { object[WireKey.recordName] = .string(recordName) }
                    if let size = token.size { object[WireKey.size] = .int(size) }
                    if let checksum = token.fileChecksum { object[WireKey.fileChecksum] = .string(checksum) }
                    return .object(object)
                }),
        ]
    }
}

/// The answer to `assets/upload`: where to POST each file, in request order.
public struct AssetUploadResponse: WireBody {
    public struct Token: Sendable, Hashable {
        public var recordName: String
        public var fieldName: String
        public var url: String
        /// Present when the request named a checksum the caller's database already holds: a
        /// receipt for those bytes, so `url` need not be used. Nimbus's addition.
        public var singleFile: Asset?

        public init(recordName: String, fieldName: String, url: String, singleFile: Asset? = nil) {
            self.recordName = recordName
            self.fieldName = fieldName
            self.url = url
            self.singleFile = singleFile
        }
    }

    public var tokens: [Token]

    public init(tokens: [Token]) { self.tokens = tokens }

    public init(json: ObjectReader) throws(CloudKitError) {
        tokens = []
        for element in try json.requiredArray(WireKey.tokens) {
            let token = try element.object()
            tokens.append(
                Token(
                    recordName: try token.requiredString(WireKey.recordName), fieldName: try token.requiredString(WireKey.fieldName),
                    url: try token.requiredString(WireKey.url), singleFile: try token.object(WireKey.singleFile).map(Asset.init(json:))))
        }
    }

    public var json: JSON {
        [
            WireKey.tokens: .array(
                tokens.map { token in
                    var object: JSONObject = [
                        WireKey.recordName: .string(token.recordName), WireKey.fieldName: .string(token.fieldName),
                        WireKey.url: .string(token.url),
                    ]
                    if let singleFile = token.singleFile { object[WireKey.singleFile] = singleFile.json }
                    return .object(object)
                })
        ]
    }
}

/// The answer to POSTing a file to its upload URL: `{"singleFile": <asset dictionary>}`, the
/// key every client reads.
public struct AssetUploadResult: WireBody {
    public var singleFile: Asset

    public init(singleFile: Asset) { self.singleFile = singleFile }

    public init(json: ObjectReader) throws(CloudKitError) {
        singleFile = try Asset(json: json.requiredObject(WireKey.singleFile))
    }

    public var json: JSON { [WireKey.singleFile: singleFile.json] }
}

/// The headers of a resumable upload (docs/assets.md, "Resumable uploads"), after the IETF's
/// resumable-uploads draft: a request sends `Upload-Complete: ?0` for a piece that is not the
/// last (`?1` for the last) and `Upload-Offset: N` for bytes that start at N; a `HEAD` on the
/// upload URL answers `Upload-Offset` with the bytes the server holds, as does a piece that
/// is not the last (204, no body).
public enum ResumableUploadHeader {
    public static let offset = "Upload-Offset"
    public static let complete = "Upload-Complete"
    public static let length = "Upload-Length"

    /// A structured-field boolean (`?1`, `?0`); nil for anything else.
    public static func boolean(_ text: String) -> Bool? {
        switch text.trimmingCharacters(in: .whitespaces) {
        case "?1": true
        case "?0": false
        default: nil
        }
    }

    public static func text(_ value: Bool) -> String { value ? "?1" : "?0" }
}

/// `assets/rereference`: asset dictionaries, with fresh receipts, for the asset fields of
/// records that exist, to save into other records without uploading again.
public struct AssetRereferenceRequest: WireBody {
    public struct Source: Sendable, Hashable {
        public var recordName: String
        public var fieldName: String

        public init(recordName: String, fieldName: String) {
            self.recordName = recordName
            self.fieldName = fieldName
        }
    }

    public var zoneID: WireZoneID
    public var assets: [Source]

    public init(zoneID: WireZoneID = .defaultZone, assets: [Source]) {
        self.zoneID = zoneID
        self.assets = assets
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        zoneID = try WireZoneID.orDefault(json)
        assets = []
        for element in try json.requiredArray(WireKey.assets, limit: Limits.assetTokensPerRequest, what: "the number of assets") {
            let source = try element.object()
            let recordName = try source.requiredString(WireKey.recordName)
            try Names.validateRecordName(recordName, path: source.childPath(WireKey.recordName))
            let fieldName = try source.requiredString(WireKey.fieldName)
            try Names.validateIdentifier(fieldName, kind: "field name", path: source.childPath(WireKey.fieldName))
            assets.append(Source(recordName: recordName, fieldName: fieldName))
        }
    }

    public var json: JSON {
        [
            WireKey.zoneID: zoneID.json,
            WireKey.assets: .array(
                assets.map { [WireKey.recordName: .string($0.recordName), WireKey.fieldName: .string($0.fieldName)] }),
        ]
    }
}

/// The answer to `assets/rereference`, in request order: the asset dictionary (an asset list
/// field gives a list of them), or the error for that entry.
public struct AssetRereferenceResponse: WireBody {
    public var assets: [ItemResult<RereferencedAsset>]

    public init(assets: [ItemResult<RereferencedAsset>]) { self.assets = assets }

    public init(json: ObjectReader) throws(CloudKitError) {
        assets = try json.requiredArray(WireKey.assets).map { element throws(CloudKitError) in
            try ItemResult(json: element.object())
        }
    }

    public var json: JSON { [WireKey.assets: .array(assets.map(\.json))] }
}

/// One field's asset dictionaries, again with receipts: one for an `ASSETID` field, each
/// element's for an `ASSETID_LIST`. On the wire an asset field's entry is the dictionary itself
/// (what CloudKit JS puts straight into the record it saves); a list field's is
/// `{"value": [dictionaries]}`.
public enum RereferencedAsset: WireBody, Sendable {
    case single(Asset)
    case list([Asset])

    public init(json: ObjectReader) throws(CloudKitError) {
        if let elements = try json.array(WireKey.value) {
            self = .list(try elements.map { element throws(CloudKitError) in try Asset(json: element.object()) })
        } else {
            self = .single(try Asset(json: json))
        }
    }

    /// The dictionaries, one or many.
    public var assets: [Asset] {
        switch self {
        case .single(let asset): [asset]
        case .list(let assets): assets
        }
    }

    public var json: JSON {
        switch self {
        case .single(let asset): return asset.json
        case .list(let assets): return [WireKey.value: .array(assets.map(\.json))]
        }
    }
}
