import Foundation
import NimbusWire

/// Long-lived operations (`configuration.isLongLived`, the 2016 session): an operation that
/// outlives the app. Before it sends anything it writes a journal (what it does: its records,
/// IDs, policy, configuration) to the container's folder; when it finishes and its callbacks
/// have run, the journal goes. After a relaunch `CKContainer.longLivedOperation(for:)` rebuilds
/// the operation from its journal; added again, it sends the same requests under the same
/// operation ID, and the server answers those it already applied from their outcomes, so the
/// callbacks arrive and nothing is applied twice (docs/sdk.md, "Operations").
///
/// Every kind of operation is journaled: database operations with their database, container
/// operations (notifications, sharing, identities) with their container. A write the server
/// applies once by request ID (records) is answered from its first outcome; a zone or
/// subscription delete resumed after its earlier launch did it reports the delete done.
final class LongLivedOperations: @unchecked Sendable {
    let directory: URL
    private let lock = NSLock()
    /// Operations of this process that are long-lived and running.
    private var running: [CKOperation.ID: CKOperation] = [:]

    init(directory: URL) { self.directory = directory }

    static func defaultDirectory(containerIdentifier: String) -> URL {
        let base =
            FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".nimbus")
        let safe = containerIdentifier.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-_."))) ?? "unnamed-container"
        return base.appendingPathComponent("NimbusKit/LongLivedOperations/\(safe)", isDirectory: true)
    }

    private func file(_ id: CKOperation.ID) -> URL {
        let safe = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-_."))) ?? id
        return directory.appendingPathComponent("\(safe).json")
    }

    /// Writes the journal (atomically: a crash leaves the old one or the new one).
    func persist(_ operation: CKOperation, journal: JSONObject) throws(CKError) {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try Data(JSON.object(journal).text.utf8).write(to: file(operation.operationID), options: .atomic)
        } catch {
            throw CKError(.internalError, "could not write the long-lived operation's journal in \(directory.path): \(error)")
        }
        lock.withLock { running[operation.operationID] = operation }
    }

    /// The operation finished and its callbacks ran: nothing to resume.
    func forget(_ id: CKOperation.ID) {
        try? FileManager.default.removeItem(at: file(id))
        _ = lock.withLock { running.removeValue(forKey: id) }
    }

    /// Journals on disk: operations of this process still running and those of earlier
    /// launches that did not finish.
    func ids() throws(CKError) -> [CKOperation.ID] {
        guard FileManager.default.fileExists(atPath: directory.path) else { return [] }
        do {
            return try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }
                .compactMap { $0.dropLast(5).removingPercentEncoding }.sorted()
        } catch {
            throw CKError(.internalError, "could not list the long-lived operations in \(directory.path): \(error)")
        }
    }

    func journal(_ id: CKOperation.ID) throws(CKError) -> JSONObject? {
        guard let data = FileManager.default.contents(atPath: file(id).path) else { return nil }
        guard case .object(let journal)? = try? JSON.parse(data) else {
            throw CKError(.internalError, "the journal of long-lived operation '\(id)' does not read; delete \(file(id).path)")
        }
        return journal
    }

    /// Stops this process's long-lived operations where they stand, keeping their journals and
    /// calling no callbacks: what the app's exit does to them. For tests of resumption.
    func abandonAll() {
        let operations = lock.withLock {
            defer { running = [:] }
            return Array(running.values)
        }
        for operation in operations { operation.abandon() }
    }
}

// MARK: Journals

/// The parts of a journal: the operation's kind, database and configuration; each kind adds its own.
enum LongLivedJournal {
    static let kind = "kind"
    static let operationID = "operationID"
    static let scope = "databaseScope"
    static let quality = "qualityOfService"
    static let requestTimeout = "timeoutIntervalForRequest"
    static let resourceTimeout = "timeoutIntervalForResource"

    static func header(_ operation: CKOperation, kind: String) -> JSONObject {
        let configuration = operation.effectiveConfiguration
        var header: JSONObject = [
            Self.kind: .string(kind), operationID: .string(operation.operationID),
            quality: .int(Int64(configuration.qualityOfService.rawValue)),
            requestTimeout: .double(configuration.timeoutIntervalForRequest),
            resourceTimeout: .double(configuration.timeoutIntervalForResource),
        ]
        if let databaseOperation = operation as? CKDatabaseOperation {
            header[scope] = .string(databaseOperation.targetDatabase.databaseScope.pathComponent)
        }
        return header
    }

    /// The operation a journal describes, on `container`, with its ID and configuration.
    static func operation(from journal: JSONObject, container: CKContainer) throws(CKError) -> CKOperation {
        guard let id = journal[operationID]?.stringValue, let kindName = journal[kind]?.stringValue else {
            throw CKError(.internalError, "a long-lived operation's journal lacks its kind or ID")
        }
        let me = container.transport.userRecordName
        let operation: CKOperation
        switch kindName {
        case CKModifyRecordsOperation.journalKind: operation = try CKModifyRecordsOperation(journal: journal)
        case CKFetchRecordsOperation.journalKind: operation = try CKFetchRecordsOperation(journal: journal)
        case CKFetchRecordZoneChangesOperation.journalKind: operation = try CKFetchRecordZoneChangesOperation(journal: journal)
        case CKFetchDatabaseChangesOperation.journalKind: operation = try CKFetchDatabaseChangesOperation(journal: journal)
        case CKFetchRecordChangesOperation.journalKind: operation = try CKFetchRecordChangesOperation(journal: journal)
        case CKQueryOperation.journalKind: operation = try CKQueryOperation(journal: journal)
        case CKModifyRecordZonesOperation.journalKind: operation = try CKModifyRecordZonesOperation(journal: journal)
        case CKFetchRecordZonesOperation.journalKind: operation = try CKFetchRecordZonesOperation(journal: journal)
        case CKModifySubscriptionsOperation.journalKind: operation = try CKModifySubscriptionsOperation(journal: journal, currentUser: me)
        case CKFetchSubscriptionsOperation.journalKind: operation = CKFetchSubscriptionsOperation(journal: journal)
        case CKFetchNotificationChangesOperation.journalKind: operation = try CKFetchNotificationChangesOperation(journal: journal)
        case CKMarkNotificationsReadOperation.journalKind: operation = CKMarkNotificationsReadOperation(journal: journal)
        case CKModifyBadgeOperation.journalKind: operation = CKModifyBadgeOperation(journal: journal)
        case CKFetchShareMetadataOperation.journalKind: operation = CKFetchShareMetadataOperation(journal: journal)
        case CKAcceptSharesOperation.journalKind: operation = try CKAcceptSharesOperation(journal: journal, currentUser: me)
        case CKFetchShareParticipantsOperation.journalKind: operation = try CKFetchShareParticipantsOperation(journal: journal)
        case CKDiscoverUserIdentitiesOperation.journalKind: operation = try CKDiscoverUserIdentitiesOperation(journal: journal)
        case CKDiscoverAllUserIdentitiesOperation.journalKind: operation = CKDiscoverAllUserIdentitiesOperation()
        default: throw CKError(.internalError, "long-lived operation '\(id)' is of a kind this NimbusKit does not resume: \(kindName)")
        }
        operation.operationID = id
        operation.isResumedFromJournal = true
        if let databaseOperation = operation as? CKDatabaseOperation {
            guard let scopeName = journal[scope]?.stringValue,
                let databaseScope = CKDatabase.Scope.allCases.first(where: { $0.pathComponent == scopeName })
            else { throw CKError(.internalError, "long-lived operation '\(id)' names no database it runs on") }
            databaseOperation.database = container.database(with: databaseScope)
        } else if let containerOperation = operation as? CKContainerOperation {
            containerOperation.container = container
        }
        let configuration = CKOperation.Configuration()
        configuration.isLongLived = true
        configuration.container = container
        if let raw = journal[quality]?.int64Value, let qos = QualityOfService(rawValue: Int(raw)) { configuration.qualityOfService = qos }
        if let seconds = journal[requestTimeout]?.doubleValue { configuration.timeoutIntervalForRequest = seconds }
        if let seconds = journal[resourceTimeout]?.doubleValue { configuration.timeoutIntervalForResource = seconds }
        operation.configuration = configuration
        return operation
    }

    // Arguments that archive themselves (zone IDs, zones, change tokens, queries, cursors)

    static func archive(_ object: any NSObject & NSSecureCoding) throws(CKError) -> JSON {
        do {
            return .string(try NSKeyedArchiver.archivedData(withRootObject: object, requiringSecureCoding: true).base64EncodedString())
        } catch {
            throw CKError(.invalidArguments, "\(type(of: object)) cannot be journaled for a long-lived operation: \(error)")
        }
    }

    static func archives(_ objects: [some NSObject & NSSecureCoding]) throws(CKError) -> JSON {
        .array(try objects.map { object throws(CKError) in try archive(object) })
    }

    /// The object a journal entry archived; nil when the entry is absent.
    static func unarchive<Object: NSObject & NSSecureCoding>(_ type: Object.Type, _ json: JSON?) throws(CKError) -> Object? {
        guard let json, json != .null else { return nil }
        guard let text = json.stringValue, let data = Data(base64Encoded: text),
            let object = try? NSKeyedUnarchiver.unarchivedObject(ofClass: type, from: data)
        else { throw CKError(.internalError, "a long-lived operation's journal holds a \(type) that does not read") }
        return object
    }

    static func unarchives<Object: NSObject & NSSecureCoding>(_ type: Object.Type, _ json: JSON?) throws(CKError) -> [Object]? {
        guard let items = json?.arrayValue else { return nil }
        return try items.map { item throws(CKError) in
            guard let object = try unarchive(type, item) else {
                throw CKError(.internalError, "a long-lived operation's journal holds a \(type) that does not read")
            }
            return object
        }
    }

    // Records and IDs

    static func recordID(_ id: CKRecord.ID) -> JSON {
        ["recordName": .string(id.recordName), "zoneName": .string(id.zoneID.zoneName), "ownerName": .string(id.zoneID.ownerName)]
    }

    static func recordID(_ json: JSON) throws(CKError) -> CKRecord.ID {
        guard let name = json["recordName"]?.stringValue, let zone = json["zoneName"]?.stringValue,
            let owner = json["ownerName"]?.stringValue
        else { throw CKError(.internalError, "a long-lived operation's journal holds a record ID that does not read") }
        return CKRecord.ID(recordName: name, zoneID: CKRecordZone.ID(zoneName: zone, ownerName: owner))
    }

    /// A record to save, whole: its fields (values in the clear, as the app holds them; the
    /// journal is the app's own file), which of them are encrypted and which changed, and its
    /// system fields. Assets keep their file, their receipt once uploaded (and when it came,
    /// so a late resumption uploads again rather than send a receipt past its life) and, while
    /// uploading, their upload URL; a share keeps its people and permission (its archive).
    static func record(_ record: CKRecord) throws(CKError) -> JSON {
        var plain: [String] = []
        var assets = JSONObject()
        for (key, value, _) in record.snapshot(keys: record.allKeys()) {
            switch value {
            case let asset as CKAsset: assets[key] = ["isList": false, "items": [try self.asset(asset, key: key)]]
            case let list as [CKAsset]:
                assets[key] = ["isList": true, "items": .array(try list.map { asset throws(CKError) in try self.asset(asset, key: key) })]
            default: plain.append(key)
            }
        }
        let fields: String
        do {
            fields = try WireRecordCoder.fieldsJSONText(of: record, keys: plain)
        } catch {
            throw CKError(
                .invalidArguments,
                "record '\(record.recordID.recordName)' cannot be journaled for a long-lived operation: \(error.localizedDescription)")
        }
        var object: JSONObject = [
            "recordType": .string(record.recordType), "recordID": recordID(record.recordID), "fields": .string(fields),
            "encrypted": .strings(record.keys(encrypted: true)), "changed": .strings(record.changedKeys()),
            "parentChanged": .bool(record.isParentChanged),
        ]
        if !assets.isEmpty { object["assetFields"] = .object(assets) }
        if let tag = record.recordChangeTag { object["recordChangeTag"] = .string(tag) }
        if let parent = record.parent { object["parent"] = recordID(parent.recordID) }
        if let share = record as? CKShare {
            let archiver = NSKeyedArchiver(requiringSecureCoding: true)
            share.encodeSystemFields(with: archiver)
            archiver.finishEncoding()
            object["shareArchive"] = .string(archiver.encodedData.base64EncodedString())
        }
        return .object(object)
    }

    /// How long a journaled receipt is trusted: less than the server's hour, so a save
    /// resumed late uploads again (the server keeps the bytes once) instead of being refused.
    static let receiptTrustSeconds: TimeInterval = 45 * 60

    private static func asset(_ asset: CKAsset, key: String) throws(CKError) -> JSON {
        var object = JSONObject()
        if let file = asset.fileURL { object["sourceFile"] = .string(file.path) }
        if let stored = asset.serverAsset {
            object["storedAsset"] = .string(JSON.object([key: try WireRecordCoder.fieldValue(asset, key: key).fieldJSON()]).text)
            object["storedAt"] = .double(stored.receipt == nil ? 0 : Date().timeIntervalSince1970)
        }
        if let pending = asset.pendingUpload {
            object["upload"] = ["url": .string(pending.url), "checksum": .string(pending.checksum), "size": .int(pending.size)]
        }
        return .object(object)
    }

    private static func asset(_ json: JSON, key: String, zoneID: CKRecordZone.ID) throws -> CKAsset {
        let file = json["sourceFile"]?.stringValue.map { URL(fileURLWithPath: $0) }
        if let stored = json["storedAsset"]?.stringValue,
            let storedAt = json["storedAt"]?.doubleValue, Date().timeIntervalSince1970 - storedAt < receiptTrustSeconds || storedAt == 0,
            let (_, value) = try WireRecordCoder.fields(fromJSONText: stored, zoneID: zoneID).first, let asset = value as? CKAsset
        {
            asset.fileURL = file
            return asset
        }
        guard let file else { throw CKError(.internalError, "a journaled asset of field '\(key)' has neither a file nor a receipt") }
        let asset = CKAsset(fileURL: file)
        if let upload = json["upload"], let url = upload["url"]?.stringValue, let checksum = upload["checksum"]?.stringValue,
            let size = upload["size"]?.int64Value
        {
            asset.pendingUpload = CKAsset.PendingUpload(url: url, checksum: checksum, size: size)
        }
        return asset
    }

    static func record(_ json: JSON) throws(CKError) -> CKRecord {
        guard let type = json["recordType"]?.stringValue, let idJSON = json["recordID"], let fields = json["fields"]?.stringValue else {
            throw CKError(.internalError, "a long-lived operation's journal holds a record that does not read")
        }
        let id = try recordID(idJSON)
        let record: CKRecord
        if let archive = json["shareArchive"]?.stringValue {
            guard let data = Data(base64Encoded: archive), let unarchiver = try? NSKeyedUnarchiver(forReadingFrom: data),
                let share = CKShare(coder: unarchiver)
            else { throw CKError(.internalError, "a long-lived operation's journal holds a share that does not read") }
            record = share
        } else {
            record = CKRecord(recordType: type, recordID: id)
        }
        let encrypted = Set(json["encrypted"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        do {
            for (key, value) in try WireRecordCoder.fields(fromJSONText: fields, zoneID: id.zoneID) {
                record.setObject(value, forKey: key, encrypted: encrypted.contains(key))
            }
            for (key, entry) in json["assetFields"]?.objectValue?.pairs ?? [] {
                let items = try (entry["items"]?.arrayValue ?? []).map { try asset($0, key: key, zoneID: id.zoneID) }
                if entry["isList"]?.boolValue == true {
                    record.setObject(items, forKey: key, encrypted: false)
                } else if let single = items.first {
                    record.setObject(single, forKey: key, encrypted: false)
                }
            }
        } catch {
            throw CKError(.internalError, "a long-lived operation's journal holds fields that do not read: \(error)")
        }
        record.recordChangeTag = json["recordChangeTag"]?.stringValue
        let parent = try json["parent"].map { parent throws(CKError) in CKRecord.Reference(recordID: try recordID(parent), action: .none) }
        record.restoreLocalState(
            parent: parent, changedKeys: json["changed"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            parentChanged: json["parentChanged"]?.boolValue ?? false)
        return record
    }
}
