import Foundation
import NimbusWire

/// What a share record keeps besides its fields (docs/sharing.md): its short GUID, public
/// permission, participants, root and the keys clients sent that Nimbus does not read. Kept as
/// JSON text in the reserved field `___share` of the share's own record, so it is written in
/// the record's transaction on every storage driver.
struct ShareState: Hashable {
    var shortGUID: String
    var publicPermission: SharePermission
    var participants: [ShareParticipant]
    /// The root record's name; nil for a zone-wide share.
    var rootRecordName: String?
    var otherKeys: JSONObject
    /// The user ids of the participants matched to users, by user record name: what the
    /// notification pipeline needs to find their shared databases. Never answered.
    var memberIDs: [String: Int64] = [:]

    /// The reserved field of a share record holding this state.
    static let field = Names.reservedFieldPrefix + "share"
    /// The reserved field of a root record naming its share record.
    static let rootField = Names.reservedFieldPrefix + "sharedBy"

    private enum Key {
        static let root = "root"
        static let otherKeys = "otherKeys"
        static let memberIDs = "ids"
    }

    init(
        shortGUID: String, publicPermission: SharePermission, participants: [ShareParticipant], rootRecordName: String?,
        otherKeys: JSONObject
    ) {
        self.shortGUID = shortGUID
        self.publicPermission = publicPermission
        self.participants = participants
        self.rootRecordName = rootRecordName
        self.otherKeys = otherKeys
    }

    /// The state a share record's fields hold; nil when they hold none (not a share).
    init?(fields: RecordCodec.Fields) throws {
        guard case .string(let text)? = fields.first(where: { $0.name == Self.field })?.value else { return nil }
        guard case .object(let object) = try JSON.parse(Array(text.utf8)) else {
            throw CloudKitError(.internalError, "a share's stored state is not an object")
        }
        let reader = ObjectReader(object, path: Self.field)
        shortGUID = try reader.requiredString(WireKey.shortGUID)
        publicPermission = SharePermission(rawValue: try reader.string(WireKey.publicPermission) ?? "") ?? .none
        participants = try (reader.array(WireKey.participants) ?? []).map { (element) throws(CloudKitError) in
            try ShareParticipant(json: element.object())
        }
        rootRecordName = try reader.string(Key.root)
        otherKeys = try reader.object(Key.otherKeys)?.object ?? [:]
        for (name, id) in try reader.object(Key.memberIDs)?.object.pairs ?? [] {
            if let id = id.int64Value { memberIDs[name] = id }
        }
    }

    /// Sets (or replaces) the state in a share record's fields.
    func write(into fields: inout RecordCodec.Fields) {
        var object: JSONObject = [
            WireKey.shortGUID: .string(shortGUID), WireKey.publicPermission: .string(publicPermission.rawValue),
            WireKey.participants: .array(participants.map(\.json)),
        ]
        if let rootRecordName { object[Key.root] = .string(rootRecordName) }
        if !otherKeys.pairs.isEmpty { object[Key.otherKeys] = .object(otherKeys) }
        let ids = memberIDs.filter { name, _ in participants.contains { $0.userIdentity.userRecordName == name } }
        if !ids.isEmpty { object[Key.memberIDs] = .object(JSONObject(ids.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })) }
        let text = String(decoding: JSON.object(object).serialized(), as: UTF8.self)
        Self.set(Self.field, .string(text), in: &fields)
    }

    /// The share record a root's fields name, if any.
    static func sharedBy(_ fields: RecordCodec.Fields) -> String? {
        guard case .string(let name)? = fields.first(where: { $0.name == rootField })?.value else { return nil }
        return name
    }

    static func set(_ name: String, _ value: FieldValue?, in fields: inout RecordCodec.Fields) {
        if let index = fields.firstIndex(where: { $0.name == name }) {
            if let value { fields[index].value = value } else { fields.remove(at: index) }
        } else if let value {
            fields.append((name, value))
        }
    }

    /// The reserved fields of `fields`, to carry over when a save replaces the rest.
    static func reserved(_ fields: RecordCodec.Fields) -> RecordCodec.Fields {
        fields.filter { $0.name.hasPrefix(Names.reservedFieldPrefix) }
    }

    var owner: ShareParticipant? { participants.first { $0.type == .owner } }

    func participant(userRecordName: String?) -> ShareParticipant? {
        guard let userRecordName else { return nil }
        return participants.first { $0.userIdentity.userRecordName == userRecordName }
    }

    /// 128 random bits in URL-safe base64: 22 characters.
    static func newShortGUID() -> String {
        var generator = SystemRandomNumberGenerator()
        return shortGUID(bytes: (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// 16 bytes in URL-safe base64, unpadded.
    static func shortGUID(bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
