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
/// Journaled kinds: `CKModifyRecordsOperation` and `CKFetchRecordsOperation`. Other
/// operations run as ordinary ones with the flag set.
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

    static func header(_ operation: CKDatabaseOperation, kind: String) -> JSONObject {
        let configuration = operation.effectiveConfiguration
        return [
            Self.kind: .string(kind), operationID: .string(operation.operationID),
            scope: .string(operation.targetDatabase.databaseScope.pathComponent),
            quality: .int(Int64(configuration.qualityOfService.rawValue)),
            requestTimeout: .double(configuration.timeoutIntervalForRequest),
            resourceTimeout: .double(configuration.timeoutIntervalForResource),
        ]
    }

    /// The operation a journal describes, on `container`, with its ID and configuration.
    static func operation(from journal: JSONObject, container: CKContainer) throws(CKError) -> CKOperation {
        guard let id = journal[operationID]?.stringValue, let kindName = journal[kind]?.stringValue,
            let scopeName = journal[scope]?.stringValue,
            let databaseScope = CKDatabase.Scope.allCases.first(where: { $0.pathComponent == scopeName })
        else { throw CKError(.internalError, "a long-lived operation's journal lacks its kind, ID or database") }
        let operation: CKDatabaseOperation
        switch kindName {
        case CKModifyRecordsOperation.journalKind: operation = try CKModifyRecordsOperation(journal: journal)
        case CKFetchRecordsOperation.journalKind: operation = try CKFetchRecordsOperation(journal: journal)
        default: throw CKError(.internalError, "long-lived operation '\(id)' is of a kind this NimbusKit does not resume: \(kindName)")
        }
        operation.operationID = id
        operation.database = container.database(with: databaseScope)
        let configuration = CKOperation.Configuration()
        configuration.isLongLived = true
        if let raw = journal[quality]?.int64Value, let qos = QualityOfService(rawValue: Int(raw)) { configuration.qualityOfService = qos }
        if let seconds = journal[requestTimeout]?.doubleValue { configuration.timeoutIntervalForRequest = seconds }
        if let seconds = journal[resourceTimeout]?.doubleValue { configuration.timeoutIntervalForResource = seconds }
        operation.configuration = configuration
        return operation
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
    /// system fields.
    static func record(_ record: CKRecord) throws(CKError) -> JSON {
        guard !(record is CKShare) else {
            throw CKError(.invalidArguments, "a long-lived operation cannot carry a CKShare yet; save shares with an ordinary operation")
        }
        let fields: String
        do {
            fields = try WireRecordCoder.fieldsJSONText(of: record)
        } catch {
            throw CKError(
                .invalidArguments,
                "record '\(record.recordID.recordName)' cannot be journaled for a long-lived operation: \(error.localizedDescription) (assets must be uploaded first)")
        }
        var object: JSONObject = [
            "recordType": .string(record.recordType), "recordID": recordID(record.recordID), "fields": .string(fields),
            "encrypted": .strings(record.keys(encrypted: true)), "changed": .strings(record.changedKeys()),
            "parentChanged": .bool(record.isParentChanged),
        ]
        if let tag = record.recordChangeTag { object["recordChangeTag"] = .string(tag) }
        if let parent = record.parent { object["parent"] = recordID(parent.recordID) }
        return .object(object)
    }

    static func record(_ json: JSON) throws(CKError) -> CKRecord {
        guard let type = json["recordType"]?.stringValue, let idJSON = json["recordID"], let fields = json["fields"]?.stringValue else {
            throw CKError(.internalError, "a long-lived operation's journal holds a record that does not read")
        }
        let id = try recordID(idJSON)
        let record = CKRecord(recordType: type, recordID: id)
        let encrypted = Set(json["encrypted"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        do {
            for (key, value) in try WireRecordCoder.fields(fromJSONText: fields, zoneID: id.zoneID) {
                record.setObject(value, forKey: key, encrypted: encrypted.contains(key))
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
