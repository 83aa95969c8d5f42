import Foundation
import NimbusStorage

/// A unit of work's changes as `nimbus_apply` reads them (PostgresApplyFunction): JSON objects
/// with a `kind`; bytes in base64; numbers of index entries as decimal text (texts as base64 bytes), which `numeric`
/// reads exactly (an INT64 past 2^53 keeps its last digit, a double its shortest exact form).
extension PostgresCoarseStorage {
    static func json(_ changes: UnitOfWorkChanges) -> [String: Any] {
        var object: [String: Any] = [
            "sequences": changes.sequences.map { id, sequence in
                ["id": id, "read": sequence.read, "final": sequence.final, "created": created(changes).contains(id)] as [String: Any]
            },
            "badgesRead": changes.badgesRead.map { owner, value in
                ["container": owner.container, "environment": owner.environment.rawValue, "user": owner.userID, "value": value]
                    as [String: Any]
            },
            "writes": changes.writes.map(json),
        ]
        if let version = changes.subscriptionsVersion {
            object["subscriptionsVersion"] = ["read": version.read, "changes": version.changes]
        }
        return object
    }

    private static func created(_ changes: UnitOfWorkChanges) -> Set<Int64> {
        var ids = Set<Int64>()
        for case .createDatabase(let row, _) in changes.writes { ids.insert(row.id) }
        return ids
    }

    private static func bytes(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    /// An index value as `nimbus_apply` reads it: a number's exact decimal text, or a text's
    /// UTF-8 bytes in base64 (the column is bytea; jsonb cannot hold U+0000).
    private static func number(_ value: IndexValue) -> (num: Any, text: Any) {
        switch value {
        case .integer, .number: return (numericText(value) ?? NSNull(), NSNull())
        case .text(let text): return (NSNull(), Data(text.utf8).base64EncodedString())
        }
    }

    private static func owner(_ owner: NotificationOwner) -> [String: Any] {
        ["container": owner.container, "environment": owner.environment.rawValue, "user": owner.userID]
    }

    private static func json(_ write: StorageWrite) -> [String: Any] {
        var object: [String: Any]
        switch write {
        case .takeIndexRebuildRequest:
            object = [:]
        case .createDatabase(let row, let zoneID):
            object = [
                "id": row.id, "container": row.key.container, "environment": row.key.environment.rawValue,
                "scope": row.key.scope.rawValue, "owner": row.key.ownerID, "zone": zoneID,
            ]
        case .createZone(let zone):
            object = ["id": zone.id, "database": zone.databaseID, "name": zone.name, "sequence": zone.changeSequence]
        case .deleteZone(let id, let sequence), .touchZone(let id, let sequence):
            object = ["id": id, "sequence": sequence]
        case .putRecord(let id, let row, _):
            object = [
                "id": id, "zone": row.zoneID, "name": row.recordName, "type": row.recordType, "fields": bytes(row.fields),
                "parent": row.parent ?? NSNull(), "sequence": row.changeSequence, "createdAt": row.created.timestamp,
                "createdBy": row.created.userRecordName, "createdDevice": row.created.deviceID,
                "modifiedAt": row.modified.timestamp, "modifiedBy": row.modified.userRecordName,
                "modifiedDevice": row.modified.deviceID, "deleted": row.isDeleted,
            ]
        case .replaceIndexEntries(let recordID, let zoneID, let recordType, let index, let hadEntries):
            object = [
                "record": recordID, "zone": zoneID, "type": recordType, "had": hadEntries,
                "entries": index.entries.map { entry in
                    let (num, text) = number(entry.value)
                    return ["field": entry.field, "position": entry.position, "num": num, "text": text, "lon": entry.longitude ?? NSNull()]
                        as [String: Any]
                },
                "tokens": index.tokens.map { ["field": $0.field, "token": $0.token] },
                "pairs": index.pairs.map { pair in
                    let (valueNum, valueText) = number(pair.value)
                    let (sortNum, sortText) = number(pair.sortValue)
                    return [
                        "field": pair.pair.field, "sort_field": pair.pair.sortField, "value_num": valueNum, "value_text": valueText,
                        "sort_num": sortNum, "sort_text": sortText,
                    ] as [String: Any]
                },
            ]
        case .replaceReferences(let zoneID, let name, let rows):
            object = [
                "zone": zoneID, "name": name,
                "rows": rows.map {
                    ["field": $0.fieldName, "target_zone": $0.targetZoneID, "target_name": $0.targetName, "action": $0.action] as [String: Any]
                },
            ]
        case .addSchemaField(let key, let field):
            object = [
                "container": key.container, "environment": key.environment.rawValue, "type": field.recordType,
                "field": field.fieldName, "fieldType": field.fieldType, "indexes": field.indexes,
            ]
        case .setSchemaFieldIndexes(let key, let recordType, let fieldName, let indexes):
            object = [
                "container": key.container, "environment": key.environment.rawValue, "type": recordType, "field": fieldName,
                "indexes": indexes,
            ]
        case .addSchemaRecordType(let key, let recordType):
            object = ["container": key.container, "environment": key.environment.rawValue, "type": recordType]
        case .putSubscription(let row):
            object = [
                "database": row.databaseID, "user": row.userID, "id": row.subscriptionID, "definition": bytes(row.definition),
                "createdAt": row.createdAt,
            ]
        case .deleteSubscription(let databaseID, let userID, let subscriptionID):
            object = ["database": databaseID, "user": userID, "id": subscriptionID]
        case .appendOutbox(let databaseID, let body, let createdAt):
            object = ["database": databaseID, "body": bytes(body), "createdAt": createdAt]
        case .removeOutbox(let sequences):
            object = ["sequences": sequences]
        case .insertNotification(let owner, let notificationID, let originDeviceID, let payload, let createdAt, let delivery):
            object = Self.owner(owner).merging([
                "id": notificationID, "origin": originDeviceID, "payload": bytes(payload), "createdAt": createdAt,
                "collapse": delivery.collapseID ?? NSNull(), "silent": delivery.isSilent,
            ]) { $1 }
        case .markNotificationsRead(let owner, let ids):
            object = Self.owner(owner).merging(["ids": ids]) { $1 }
        case .pruneNotifications(let time):
            object = ["before": time]
        case .setBadge(let owner, let value):
            object = Self.owner(owner).merging(["value": value]) { $1 }
        }
        object["kind"] = kind(write)
        return object
    }

    private static func kind(_ write: StorageWrite) -> String {
        switch write {
        case .takeIndexRebuildRequest: "takeIndexRebuildRequest"
        case .createDatabase: "createDatabase"
        case .createZone: "createZone"
        case .deleteZone: "deleteZone"
        case .touchZone: "touchZone"
        case .putRecord: "putRecord"
        case .replaceIndexEntries: "replaceIndexEntries"
        case .replaceReferences: "replaceReferences"
        case .addSchemaField: "addSchemaField"
        case .setSchemaFieldIndexes: "setSchemaFieldIndexes"
        case .addSchemaRecordType: "addSchemaRecordType"
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
