import Foundation
import NimbusStorage
import NimbusWire

/// A unit of work's changes as `nimbus_apply` reads them (PostgresApplyFunction): JSON objects
/// with a `kind`; bytes in base64; numbers of index entries as decimal text (texts as base64 bytes), which `numeric`
/// reads exactly (an INT64 past 2^53 keeps its last digit, a double its shortest exact form).
/// Built as NimbusWire's `JSON` and written by its serializer: Foundation's `JSONSerialization`
/// over `[String: Any]` took 70% of the server's processor time on a 200-record batch.
extension PostgresCoarseStorage {
    static func json(_ changes: UnitOfWorkChanges) -> JSON {
        let created = changes.createdZones
        var object: JSONObject = [
            // Zones made by the unit are inserted with their last record sequence
            // (`withFinalSequences`), so only committed ones are checked; in id order, as
            // `nimbus_apply` locks them.
            "zones": .array(
                changes.zoneSequences.filter { !created.contains($0.key) }.sorted { $0.key < $1.key }.map { id, sequence in
                    ["id": .int(id), "read": .int(sequence.read), "final": .int(sequence.final)]
                }),
            "databasesRead": .array(
                changes.databasesRead.sorted { $0.key < $1.key }.map { id, read in ["id": .int(id), "read": .int(read)] }),
            "databases": .array(databases(changes)),
            "badgesRead": .array(
                changes.badgesRead.map { owner, value in
                    .object(Self.owner(owner).merging(["value": .int(value)]))
                }),
            "writes": .array(withFinalSequences(writes(changes.writes), changes)),
        ]
        if let version = changes.subscriptionsVersion {
            object["subscriptionsVersion"] = ["read": .int(version.read), "changes": .int(Int64(version.changes))]
        }
        return .object(object)
    }

    /// Per database the unit changes, in id order (as `nimbus_apply` locks them): the zones to
    /// stamp with its next sequences and the bytes to add, with what the unit read.
    private static func databases(_ changes: UnitOfWorkChanges) -> [JSON] {
        let stamped = Dictionary(grouping: changes.zonesChanged, by: \.value).mapValues { $0.map(\.key).sorted() }
        return Set(stamped.keys).union(changes.usage.keys).sorted().map { id in
            var object: JSONObject = ["id": .int(id), "stamps": .array((stamped[id] ?? []).map(JSON.int))]
            if let usage = changes.usage[id] {
                object["read"] = .int(usage.read)
                object["bytes"] = .int(usage.bytes)
                object["quota"] = .int(usage.quota)
            }
            return .object(object)
        }
    }

    /// The writes, a zone the unit makes (with a database, or on its own) carrying the record
    /// sequence its records left it at as `recordSequence`: made zones are not in the checks.
    private static func withFinalSequences(_ writes: [JSON], _ changes: UnitOfWorkChanges) -> [JSON] {
        writes.map { write in
            guard case .object(var object) = write, case .string(let kind) = object["kind"],
                case .int(let zoneID) = object[kind == "createDatabase" ? "zone" : "id"],
                kind == "createDatabase" || kind == "createZone", let final = changes.zoneSequences[zoneID]?.final
            else { return write }
            object["recordSequence"] = .int(final)
            return .object(object)
        }
    }

    private static func bytes(_ bytes: [UInt8]) -> JSON { .string(Data(bytes).base64EncodedString()) }

    private static func optional(_ text: String?) -> JSON { text.map(JSON.string) ?? .null }

    /// An index value as `nimbus_apply` reads it: a number's exact decimal text, or a text's
    /// UTF-8 bytes in base64 (the column is bytea; jsonb cannot hold U+0000).
    private static func number(_ value: IndexValue) -> (num: JSON, text: JSON) {
        switch value {
        case .integer, .number: return (optional(numericText(value)), .null)
        case .text(let text): return (.null, bytes(Array(text.utf8)))
        }
    }

    private static func owner(_ owner: NotificationOwner) -> JSONObject {
        ["container": .string(owner.container), "environment": .string(owner.environment.rawValue), "user": .int(owner.userID)]
    }

    private static func schemaKey(_ key: SchemaKey) -> JSONObject {
        ["container": .string(key.container), "environment": .string(key.environment.rawValue)]
    }

    /// The writes in order, each run of record saves (`putRecord` and `replaceIndexEntries`
    /// with nothing else between them) as one `putRecords` and one `replaceIndexes`, which
    /// `nimbus_apply` writes a statement per table (PostgresApplyFunction.v6). A record saved
    /// twice in a run (two writes of one group) is sent once, as its last version, with its
    /// last index entries.
    static func writes(_ writes: [StorageWrite]) -> [JSON] {
        var sent: [JSON] = []
        var run = RecordRun()
        for write in writes {
            switch write {
            case .putRecord(let id, let row, _):
                run.records.put(RecordKey(zoneID: row.zoneID, name: row.recordName), record(id, row))
            case .replaceIndexEntries(let recordID, let zoneID, let recordType, let index, let hadEntries):
                run.indexes.put(recordID, (zoneID, recordType, index))
                if hadEntries { run.had[recordID] = zoneID }
            default:
                sent += run.flush()
                sent.append(json(write))
            }
        }
        return sent + run.flush()
    }

    /// Record saves gathered until a write of another kind.
    private struct RecordRun {
        var records = LastByKey<RecordKey, JSONObject>()
        var indexes = LastByKey<Int64, (zoneID: Int64, recordType: String, index: RecordIndexEntries)>()
        /// Records whose committed entries go first, with their zones.
        var had: [Int64: Int64] = [:]

        mutating func flush() -> [JSON] {
            defer { self = RecordRun() }
            var sent: [JSON] = []
            if !records.isEmpty {
                sent.append(["kind": "putRecords", "rows": .array(records.values.map(JSON.object))])
            }
            if !indexes.isEmpty {
                var entries: [JSON] = [], tokens: [JSON] = [], pairs: [JSON] = []
                for (recordID, (zoneID, recordType, index)) in indexes.pairs {
                    let owner: JSONObject = ["record": .int(recordID), "zone": .int(zoneID), "type": .string(recordType)]
                    entries += PostgresCoarseStorage.entries(index).map { .object(owner.merging($0)) }
                    tokens += PostgresCoarseStorage.tokens(index).map { .object(owner.merging($0)) }
                    pairs += PostgresCoarseStorage.pairs(index).map { .object(owner.merging($0)) }
                }
                let had: [JSON] = had.sorted { $0.key < $1.key }.map { ["record": .int($0.key), "zone": .int($0.value)] }
                sent.append([
                    "kind": "replaceIndexes", "had": .array(had), "entries": .array(entries), "tokens": .array(tokens),
                    "pairs": .array(pairs),
                ])
            }
            return sent
        }
    }

    /// Values by key in the order their keys came first, each key's last value kept.
    private struct LastByKey<Key: Hashable, Value> {
        private var order: [Key] = []
        private var byKey: [Key: Value] = [:]

        var isEmpty: Bool { order.isEmpty }

        mutating func put(_ key: Key, _ value: Value) {
            if byKey.updateValue(value, forKey: key) == nil { order.append(key) }
        }

        var pairs: [(Key, Value)] { order.map { ($0, byKey[$0]!) } }
        var values: [Value] { order.map { byKey[$0]! } }
    }

    /// A record row as `putRecord` and `putRecords` read it.
    private static func record(_ id: Int64, _ row: RecordRow) -> JSONObject {
        [
            "id": .int(id), "zone": .int(row.zoneID), "name": .string(row.recordName), "type": .string(row.recordType),
            "fields": bytes(row.fields), "parent": optional(row.parent), "sequence": .int(row.changeSequence),
            "createdAt": .int(row.created.timestamp), "createdBy": .string(row.created.userRecordName),
            "createdDevice": .string(row.created.deviceID), "modifiedAt": .int(row.modified.timestamp),
            "modifiedBy": .string(row.modified.userRecordName), "modifiedDevice": .string(row.modified.deviceID),
            "deleted": .bool(row.isDeleted),
        ]
    }

    private static func entries(_ index: RecordIndexEntries) -> [JSONObject] {
        index.entries.map { entry in
            let (num, text) = number(entry.value)
            return [
                "field": .string(entry.field), "position": .int(Int64(entry.position)), "num": num, "text": text,
                "lon": entry.longitude.map(JSON.double) ?? .null,
            ]
        }
    }

    private static func tokens(_ index: RecordIndexEntries) -> [JSONObject] {
        index.tokens.map { ["field": .string($0.field), "token": .string($0.token)] }
    }

    private static func pairs(_ index: RecordIndexEntries) -> [JSONObject] {
        index.pairs.map { pair in
            let (valueNum, valueText) = number(pair.value)
            let (sortNum, sortText) = number(pair.sortValue)
            return [
                "field": .string(pair.pair.field), "sort_field": .string(pair.pair.sortField), "value_num": valueNum,
                "value_text": valueText, "sort_num": sortNum, "sort_text": sortText,
            ]
        }
    }

    private static func json(_ write: StorageWrite) -> JSON {
        var object: JSONObject
        switch write {
        case .takeIndexRebuildRequest:
            object = [:]
        case .createDatabase(let row, let zoneID):
            object = [
                "id": .int(row.id), "container": .string(row.key.container), "environment": .string(row.key.environment.rawValue),
                "scope": .string(row.key.scope.rawValue), "owner": .int(row.key.ownerID), "zone": .int(zoneID),
            ]
        case .createZone(let zone, let replacing):
            object = [
                "id": .int(zone.id), "database": .int(zone.databaseID), "name": .string(zone.name),
                "recordSequence": .int(zone.recordSequence), "replacing": replacing.map(JSON.int) ?? .null,
            ]
        case .deleteZone(let id):
            object = ["id": .int(id)]
        case .putRecord(let id, let row, _):
            object = record(id, row)
        case .replaceIndexEntries(let recordID, let zoneID, let recordType, let index, let hadEntries):
            object = [
                "record": .int(recordID), "zone": .int(zoneID), "type": .string(recordType), "had": .bool(hadEntries),
                "entries": .array(entries(index).map(JSON.object)), "tokens": .array(tokens(index).map(JSON.object)),
                "pairs": .array(pairs(index).map(JSON.object)),
            ]
        case .replaceReferences(let zoneID, let name, let rows):
            object = [
                "zone": .int(zoneID), "name": .string(name),
                "rows": .array(
                    rows.map {
                        [
                            "field": .string($0.fieldName), "target_zone": .int($0.targetZoneID), "target_name": .string($0.targetName),
                            "action": .string($0.action),
                        ]
                    }),
            ]
        case .replaceAssetReferences(let zoneID, let name, let container, let rows):
            object = [
                "zone": .int(zoneID), "name": .string(name), "container": .string(container),
                "rows": .array(
                    rows.map {
                        [
                            "field": .string($0.fieldName), "position": .int(Int64($0.position)), "checksum": .string($0.checksum),
                            "size": .int($0.size),
                        ]
                    }),
            ]
        case .addSchemaField(let key, let field):
            object = schemaKey(key).merging([
                "type": .string(field.recordType), "field": .string(field.fieldName), "fieldType": .string(field.fieldType),
                "indexes": .int(Int64(field.indexes)),
            ])
        case .setSchemaFieldIndexes(let key, let recordType, let fieldName, let indexes):
            object = schemaKey(key).merging(["type": .string(recordType), "field": .string(fieldName), "indexes": .int(Int64(indexes))])
        case .addSchemaRecordType(let key, let recordType):
            object = schemaKey(key).merging(["type": .string(recordType)])
        case .removeFromSchema(let key, let recordType, let fieldName):
            object = schemaKey(key).merging(["type": .string(recordType), "field": fieldName.map(JSON.string) ?? .null])
        case .putSubscription(let row):
            object = [
                "database": .int(row.databaseID), "user": .int(row.userID), "id": .string(row.subscriptionID),
                "definition": bytes(row.definition), "createdAt": .int(row.createdAt),
            ]
        case .deleteSubscription(let databaseID, let userID, let subscriptionID):
            object = ["database": .int(databaseID), "user": .int(userID), "id": .string(subscriptionID)]
        case .appendOutbox(let databaseID, let body, let createdAt):
            object = ["database": .int(databaseID), "body": bytes(body), "createdAt": .int(createdAt)]
        case .removeOutbox(let sequences):
            object = ["sequences": .array(sequences.map(JSON.int))]
        case .insertNotification(let owner, let notificationID, let originDeviceID, let payload, let createdAt, let delivery):
            object = Self.owner(owner).merging([
                "id": .string(notificationID), "origin": .string(originDeviceID), "payload": bytes(payload),
                "createdAt": .int(createdAt), "collapse": optional(delivery.collapseID), "silent": .bool(delivery.isSilent),
            ])
        case .markNotificationsRead(let owner, let ids):
            object = Self.owner(owner).merging(["ids": .array(ids.map(JSON.string))])
        case .pruneNotifications(let time):
            object = ["before": .int(time)]
        case .setBadge(let owner, let value):
            object = Self.owner(owner).merging(["value": .int(value)])
        }
        object["kind"] = .string(kind(write))
        return .object(object)
    }

    private static func kind(_ write: StorageWrite) -> String {
        switch write {
        case .takeIndexRebuildRequest: "takeIndexRebuildRequest"
        case .createDatabase: "createDatabase"
        case .createZone: "createZone"
        case .deleteZone: "deleteZone"
        case .putRecord: "putRecord"
        case .replaceIndexEntries: "replaceIndexEntries"
        case .replaceReferences: "replaceReferences"
        case .replaceAssetReferences: "replaceAssetReferences"
        case .addSchemaField: "addSchemaField"
        case .setSchemaFieldIndexes: "setSchemaFieldIndexes"
        case .addSchemaRecordType: "addSchemaRecordType"
        case .removeFromSchema: "removeFromSchema"
        case .putSubscription: "putSubscription"
        case .deleteSubscription: "deleteSubscription"
        case .appendOutbox: "appendOutbox"
        case .removeOutbox: "removeOutbox"
        case .insertNotification: "insertNotification"
        case .markNotificationsRead: "markNotificationsRead"
        case .pruneNotifications: "pruneNotifications"
        case .setBadge: "setBadge"
        }
    }
}

extension JSONObject {
    /// This object with `other`'s keys added (the changes' parts share no keys).
    fileprivate func merging(_ other: JSONObject) -> JSONObject {
        var merged = self
        for (key, value) in other.pairs { merged[key] = value }
        return merged
    }
}
