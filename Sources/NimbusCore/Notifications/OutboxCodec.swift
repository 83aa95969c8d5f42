import NimbusStorage
import NimbusWire

/// `CommittedChanges` as an entry of the change outbox, written in the changing transaction and
/// read back by the notification pipeline, perhaps after a restart or by another process.
/// Records go whole (before and after), since matching needs both and the "before" exists
/// nowhere else once the change commits.
///
/// JSON arrays by position, a storage format of its own (no keys to mistake for the wire's):
/// `[version, [databaseID, container, environment, scope, ownerID, sequence], deviceID,
/// [[zoneName, before|null, after|null]…], [[zoneName, deleted]…]]`, a record being
/// `[zoneID, recordName, recordType, fieldsText, changeSequence, created, modified, deleted,
/// parent|null]` and a stamp `[timestamp, userRecordName, deviceID]`.
enum OutboxCodec {
    static let version: Int64 = 1

    static func encode(_ changes: CommittedChanges) -> [UInt8] {
        let database = changes.database
        let key = database.key
        let body: JSON = .array([
            .int(version),
            .array([
                .int(database.id), .string(key.container), .string(key.environment.rawValue), .string(key.scope.rawValue),
                .int(key.ownerID), .int(database.sequence),
            ]),
            .string(changes.deviceID),
            .array(changes.records.map { .array([.string($0.zoneName), $0.before.map(row) ?? .null, $0.after.map(row) ?? .null]) }),
            .array(changes.zones.map { .array([.string($0.name), .bool($0.deleted)]) }),
        ])
        return body.serialized()
    }

    static func decode(_ bytes: [UInt8]) throws -> CommittedChanges {
        guard let body = (try? JSON.parse(bytes))?.arrayValue, body.count == 5, body[0].int64Value == version,
            let db = body[1].arrayValue, db.count == 6, let id = db[0].int64Value, let container = db[1].stringValue,
            let environment = db[2].stringValue.flatMap(Environment.init(rawValue:)),
            let scope = db[3].stringValue.flatMap(DatabaseScope.init(rawValue:)), let owner = db[4].int64Value,
            let sequence = db[5].int64Value, let deviceID = body[2].stringValue, let records = body[3].arrayValue,
            let zones = body[4].arrayValue
        else { throw StorageError.corrupt("an outbox entry does not read as version \(version)") }
        let database = DatabaseRow(
            id: id, key: DatabaseKey(container: container, environment: environment, scope: scope, ownerID: owner), sequence: sequence)
        let changes: [RecordChange] = try records.map { record in
            guard let parts = record.arrayValue, parts.count == 3, let zone = parts[0].stringValue else {
                throw StorageError.corrupt("an outbox record change is garbled")
            }
            let change = RecordChange(
                zoneName: zone, before: parts[1].isNull ? nil : try row(parts[1]), after: parts[2].isNull ? nil : try row(parts[2]))
            guard change.before != nil || change.after != nil else { throw StorageError.corrupt("an outbox record change is empty") }
            return change
        }
        let zoneChanges: [(name: String, deleted: Bool)] = try zones.map { zone in
            guard let pair = zone.arrayValue, pair.count == 2, let name = pair[0].stringValue, let deleted = pair[1].boolValue else {
                throw StorageError.corrupt("an outbox zone change is garbled")
            }
            return (name, deleted)
        }
        return CommittedChanges(database: database, deviceID: deviceID, records: changes, zones: zoneChanges)
    }

    private static func row(_ row: RecordRow) -> JSON {
        .array([
            .int(row.zoneID), .string(row.recordName), .string(row.recordType), .string(String(decoding: row.fields, as: UTF8.self)),
            .int(row.changeSequence), stamp(row.created), stamp(row.modified), .bool(row.isDeleted),
            row.parent.map(JSON.string) ?? .null,
        ])
    }

    private static func stamp(_ stamp: ChangeStamp) -> JSON {
        .array([.int(stamp.timestamp), .string(stamp.userRecordName), .string(stamp.deviceID)])
    }

    private static func row(_ json: JSON) throws -> RecordRow {
        guard let parts = json.arrayValue, parts.count == 9, let zoneID = parts[0].int64Value, let name = parts[1].stringValue,
            let type = parts[2].stringValue, let fields = parts[3].stringValue, let sequence = parts[4].int64Value,
            let deleted = parts[7].boolValue
        else { throw StorageError.corrupt("an outbox record is garbled") }
        return RecordRow(
            zoneID: zoneID, recordName: name, recordType: type, fields: Array(fields.utf8), parent: parts[8].stringValue,
            changeSequence: sequence, created: try stamp(parts[5]), modified: try stamp(parts[6]), isDeleted: deleted)
    }

    private static func stamp(_ json: JSON) throws -> ChangeStamp {
        guard let parts = json.arrayValue, parts.count == 3, let time = parts[0].int64Value, let user = parts[1].stringValue,
            let device = parts[2].stringValue
        else { throw StorageError.corrupt("an outbox change stamp is garbled") }
        return ChangeStamp(timestamp: time, userRecordName: user, deviceID: device)
    }
}
