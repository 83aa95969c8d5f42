import Foundation
import NimbusWire

/// Records, zone IDs and field values between NimbusKit's objects and the Web Services JSON
/// (reference §2). Field values go through NimbusWire's `FieldValue`, the same code the server
/// reads them with.
enum WireRecordCoder {
    // MARK: Zone IDs

    /// The owner the server names is the signed-in user (or the default zone's placeholder):
    /// NimbusKit calls it `CKCurrentUserDefaultName`, as CloudKit does, so IDs made locally and
    /// IDs the server returns compare equal.
    static func zoneID(_ wire: WireZoneID?, currentUser: String?) -> CKRecordZone.ID {
        CKRecordZone.ID(
            zoneName: wire?.zoneName ?? CKRecordZone.ID.defaultZoneName,
            ownerName: ownerName(wire?.ownerRecordName, currentUser: currentUser))
    }

    static func ownerName(_ owner: String?, currentUser: String?) -> String {
        guard let owner, owner != Names.defaultOwner, owner != currentUser else { return CKCurrentUserDefaultName }
        return owner
    }

    static func zoneIDInput(_ zoneID: CKRecordZone.ID) -> WireZoneID {
        WireZoneID(
            zoneName: zoneID.zoneName, ownerRecordName: zoneID.ownerName == CKCurrentUserDefaultName ? nil : zoneID.ownerName)
    }


    // MARK: Field values

    /// A field value as the wire carries it; unsupported values are `invalidArguments`.
    static func fieldValue(_ value: any CKRecordValue, key: String) throws(CKError) -> FieldValue {
        switch value {
        case let string as String: return .string(string)
        case let number as NSNumber: return number.isFloatingPoint ? .double(number.doubleValue) : .int64(number.int64Value)
        case let date as Date: return .timestamp(milliseconds(date))
        case let data as Data: return .bytes(data.base64EncodedString())
        case let reference as CKRecord.Reference:
            return .reference(
                Reference(
                    recordName: reference.recordID.recordName, zoneName: reference.recordID.zoneID.zoneName,
                    ownerRecordName: nil, action: reference.action == .deleteSelf ? .deleteSelf : ReferenceAction.none))
        case let location as CLLocation:
            var wire = Location(latitude: location.coordinate.latitude, longitude: location.coordinate.longitude)
            wire.horizontalAccuracy = location.horizontalAccuracy
            wire.verticalAccuracy = location.verticalAccuracy
            wire.altitude = location.altitude
            wire.speed = location.speed
            wire.course = location.course
            wire.timestamp = milliseconds(location.timestamp)
            return .location(wire)
        case let asset as CKAsset:
            // Uploaded (or fetched): the server's dictionary. A file not uploaded yet cannot be
            // saved; `AssetUploader` uploads every such file before the record is sent.
            guard let wire = asset.serverAsset else {
                throw CKError(
                    .assetNotAvailable, "field '\(key)': the asset's file has not been uploaded; save it through CKDatabase or CKModifyRecordsOperation")
            }
            var sent = wire
            sent.downloadURL = nil
            return .asset(sent)
        case let list as [any CKRecordValue]:
            let elements = try list.map { element throws(CKError) in try fieldValue(element, key: key) }
            guard let scalar = elements.first?.type.scalar ?? emptyListType(value) else {
                throw CKError(.invalidArguments, "field '\(key)': cannot tell the element type of an empty list of \(type(of: value))")
            }
            guard elements.allSatisfy({ $0.type.scalar == scalar && !$0.type.isList }) else {
                throw CKError(.invalidArguments, "field '\(key)': a list's elements must all have one type (\(scalar.rawValue))")
            }
            return .list(scalar, elements)
        default:
            throw CKError(
                .invalidArguments,
                "field '\(key)': \(type(of: value)) is not a CloudKit value; use String, a number, Date, Data, CKRecord.Reference, CKAsset, CLLocation or an array of one of them")
        }
    }

    private static func emptyListType(_ value: Any) -> ScalarType? {
        switch value {
        case is [String]: return .string
        case is [Date]: return .timestamp
        case is [Data]: return .bytes
        case is [CKRecord.Reference]: return .reference
        case is [CLLocation]: return .location
        case is [CKAsset]: return .asset
        case is [Double], is [Float]: return .double
        case is [NSNumber], is [Int], is [Int64], is [Int32]: return .int64
        default: return nil
        }
    }

    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// A value as CloudKit hands it to apps.
    static func recordValue(_ value: FieldValue, zoneID: CKRecordZone.ID, currentUser: String?) -> any CKRecordValue {
        switch value {
        case .string(let text): return text
        case .int64(let number): return NSNumber(value: number)
        case .double(let number): return NSNumber(value: number)
        case .timestamp(let millis): return Date(timeIntervalSince1970: Double(millis) / 1000)
        case .bytes(let base64): return Data(base64Encoded: base64) ?? Data()
        case .reference(let reference):
            let targetZone =
                reference.zoneName.map {
                    CKRecordZone.ID(zoneName: $0, ownerName: ownerName(reference.ownerRecordName, currentUser: currentUser))
                } ?? zoneID
            return CKRecord.Reference(
                recordID: CKRecord.ID(recordName: reference.recordName, zoneID: targetZone),
                action: reference.action == .deleteSelf ? .deleteSelf : .none)
        case .location(let location):
            return CLLocation(
                coordinate: CLLocationCoordinate2D(latitude: location.latitude, longitude: location.longitude),
                altitude: location.altitude ?? 0, horizontalAccuracy: location.horizontalAccuracy ?? 0,
                verticalAccuracy: location.verticalAccuracy ?? -1, course: location.course ?? -1, speed: location.speed ?? -1,
                timestamp: location.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? Date())
        case .asset(let asset):
            return CKAsset(serverAsset: asset, fileURL: nil)
        case .list(_, let elements):
            let values = elements.map { recordValue($0, zoneID: zoneID, currentUser: currentUser) }
            return RecordValueNormalizer.normalizeList(values)
        case .encrypted:
            // Opened before this (`decodeFields`); what reaches here is never shown as ciphertext.
            return Data()
        }
    }

    // MARK: Records

    /// A record dictionary from the server as a `CKRecord`, with nothing marked changed.
    /// Encrypted fields are opened with the zone's key from `ciphers`; without ciphers (the
    /// public database, which keeps none) they are left out. A share of one of the user's own
    /// zones gets the zone's key in its URL's fragment, for the people it is handed to.
    static func record(_ wire: RecordOutput, zoneID: CKRecordZone.ID?, currentUser: String?, ciphers: FieldCiphers? = nil)
        throws(CKError) -> CKRecord
    {
        let zone = zoneID ?? self.zoneID(wire.zoneID, currentUser: currentUser)
        let recordID = CKRecord.ID(recordName: wire.recordName, zoneID: zone)
        let record =
            wire.recordType == Names.shareRecordType
            ? CKShare(recordID: recordID, facts: wire.sharing, currentUser: currentUser)
            : CKRecord(recordType: wire.recordType, recordID: recordID)
        for field in try decodeFields(wire.fields, zoneID: zone, currentUser: currentUser) {
            guard case .encrypted(_, let ciphertext) = field.wire else {
                record.setObject(field.value, forKey: field.name)
                continue
            }
            guard let ciphers else { continue }
            let cipher = try ciphers.cipher(zone: zone, user: currentUser, create: false)
            let plain = try cipher.open(ciphertext, recordName: wire.recordName, key: field.name)
            let value = exactDates(plain.exactDates, of: plain.value) ?? recordValue(plain.value, zoneID: zone, currentUser: currentUser)
            record.setObject(value, forKey: field.name, encrypted: true)
        }
        if let share = record as? CKShare, let ciphers, let currentUser, zone.ownerName == CKCurrentUserDefaultName || zone.ownerName == currentUser,
            let userKey = ciphers.heldUserKey(user: currentUser)
        {
            share.carryZoneKey(FieldCiphers.ownZoneKey(userKey: userKey, user: currentUser, zoneName: zone.zoneName))
        }
        record.recordChangeTag = wire.recordChangeTag
        if let created = wire.created {
            record.creationDate = date(milliseconds: created.timestamp)
            record.creatorUserRecordID = created.userRecordName.map { userRecordID($0, currentUser: currentUser) }
        }
        if let modified = wire.modified {
            record.modificationDate = date(milliseconds: modified.timestamp)
            record.lastModifiedUserRecordID = modified.userRecordName.map { userRecordID($0, currentUser: currentUser) }
            record.modifiedByDevice = modified.deviceID
        }
        let parent = wire.parent.map { CKRecord.Reference(recordID: CKRecord.ID(recordName: $0, zoneID: zone), action: .none) }
        record.share = wire.share.map { CKRecord.Reference(recordID: CKRecord.ID(recordName: $0, zoneID: zone), action: .none) }
        record.markFetchedFromServer(parent: parent)
        return record
    }

    /// An encrypted date (or list of dates) as the app saved it, when its exact seconds were
    /// sealed with it (one for each date the wire value holds).
    static func exactDates(_ exact: [Date]?, of value: FieldValue) -> (any CKRecordValue)? {
        guard let exact else { return nil }
        switch value {
        case .timestamp where exact.count == 1: return exact[0]
        case .list(.timestamp, let elements) where elements.count == exact.count: return exact
        default: return nil
        }
    }

    static func date(milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }

    /// The signed-in user's own record ID is named `CKCurrentUserDefaultName`, as in CloudKit.
    static func userRecordID(_ name: String, currentUser: String?) -> CKRecord.ID {
        CKRecord.ID(recordName: name == currentUser ? CKCurrentUserDefaultName : name)
    }

    private static func decodeFields(_ fields: RecordFields, zoneID: CKRecordZone.ID, currentUser: String?) throws(CKError)
        -> [(name: String, value: any CKRecordValue, wire: FieldValue)]
    {
        do {
            return try fields.values().map { ($0.name, recordValue($0.value, zoneID: zoneID, currentUser: currentUser), $0.value) }
        } catch {
            throw CKError(.serverResponseLost, "the server sent a record field that does not read: \(error.reason)")
        }
    }

    /// The `record` of a modify operation: `keys` with their values (a removed key clears the
    /// field), the change tag when the save checks it, the parent when it changed. Encrypted
    /// values are sealed with `cipher` here, so only ciphertext leaves the device.
    static func recordInput(_ record: CKRecord, keys: [String], includeChangeTag: Bool, cipher: FieldCipher? = nil) throws(CKError)
        -> RecordInput
    {
        var fields: [(name: String, field: RawField)] = []
        for (key, value, encrypted) in record.snapshot(keys: keys) {
            guard let value else {
                fields.append((key, RawField(value: .null, declaredType: nil)))
                continue
            }
            var wire = try fieldValue(value, key: key)
            if encrypted {
                guard let cipher else {
                    throw CKError(
                        .invalidArguments, "field '\(key)': the public database keeps no encrypted values (everyone may read it); save it in the private or a shared database")
                }
                let dates = (value as? Date).map { [$0] } ?? (value as? [Date])
                wire = try cipher.seal(wire, exactDates: dates, recordName: record.recordID.recordName, key: key)
            }
            fields.append((key, wire.rawField))
        }
        var input = RecordInput(
            recordName: record.recordID.recordName, recordType: record.recordType,
            recordChangeTag: includeChangeTag ? record.recordChangeTag : nil, fields: fields,
            parent: record.isParentChanged ? .some(record.parent?.recordID.recordName) : nil)
        if let share = record as? CKShare {
            // A share is always sent whole: its participants and public permission.
            input.participants = share.wireParticipants
            input.publicPermission = share.publicPermission.wire
            input.otherKeys = share.otherKeys
            if !share.wasSavedOnServer, let root = share.rootRecordID { input.forRecord = (root.recordName, nil) }
        }
        return input
    }

    // MARK: Local archive of fields (NSSecureCoding)

    static func fieldsJSONText(of record: CKRecord, keys: [String]? = nil) throws(CKError) -> String {
        var fields = JSONObject()
        for (key, value, _) in record.snapshot(keys: keys ?? record.allKeys()) {
            if let value { fields[key] = try fieldValue(value, key: key).fieldJSON() }
        }
        return JSON.object(fields).text
    }

    static func fields(fromJSONText text: String, zoneID: CKRecordZone.ID) throws -> [(String, any CKRecordValue)] {
        guard case .object(let fields) = try JSON.parse(text) else { return [] }
        return try decodeFields(RecordFields(fields), zoneID: zoneID, currentUser: nil).map { ($0.name, $0.value) }
    }
}

extension NSNumber {
    /// Whether the number was made from a floating-point value (`objCType` "f" or "d").
    var isFloatingPoint: Bool {
        let type = String(cString: objCType)
        return type == "f" || type == "d"
    }
}
