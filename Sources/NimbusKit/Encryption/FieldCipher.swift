import Crypto
import Foundation
import NimbusWire

/// Seals and opens `encryptedValues` with a zone's key (AES-GCM, 256-bit): in the user's own
/// zones one derived from the user's key, in a zone shared with them the key the share's URL
/// brought (`FieldCiphers`).
///
/// A ciphertext is `version (1) ‖ key ID (8) ‖ nonce (12) ‖ sealed value ‖ tag (16)`, sent as
/// base64 in a field of type `ENCRYPTED_<TYPE>`. What is sealed is the value's own field JSON
/// (`{"value": …, "type": …}`), so a list or a location comes back as itself. The record's name
/// and the field's key are authenticated with it: ciphertext moved to another record or field
/// does not open. The key ID lets a device with another key say so (`CKErrorUserDidResetEncryptedDataKey`)
/// instead of reporting damaged bytes.
///
/// A date (or list of dates) is sealed with its exact seconds too (`exactDates`): the server
/// never reads it, so, as with CloudKit's encrypted values, it comes back as the app saved it,
/// not cut to the wire's milliseconds (apps compare such dates to settle conflicts).
struct FieldCipher: Sendable {
    static let version: UInt8 = 1
    static let keyBytes = 32
    private static let keyIDBytes = 8

    /// The key new values are sealed with.
    private let key: SymmetricKey
    let keyID: Data
    /// Every key this cipher opens with, by ID: the sealing key, and for a zone of the user's
    /// own the user's key, which sealed that zone's values before zones had keys of their own.
    private let openingKeys: [Data: SymmetricKey]

    init(keyData: Data, alsoOpensWith others: [Data] = []) {
        key = SymmetricKey(data: keyData)
        keyID = Self.identifier(of: keyData)
        var opening = [keyID: key]
        for other in others { opening[Self.identifier(of: other)] = SymmetricKey(data: other) }
        openingKeys = opening
    }

    static func identifier(of keyData: Data) -> Data {
        Data(SHA256.hash(data: Data("nimbus-encrypted-values-key".utf8) + keyData).prefix(keyIDBytes))
    }

    /// The value's ciphertext; references and assets cannot be encrypted (the server must read them).
    func seal(_ value: FieldValue, exactDates: [Date]? = nil, recordName: String, key field: String) throws(CKError) -> FieldValue {
        guard value.type.scalar.canBeEncrypted else {
            throw CKError(
                .invalidArguments,
                "field '\(field)': a \(value.type.wireName) cannot be an encrypted value (the server must read references and assets); encrypt strings, numbers, dates, data, locations or lists of them")
        }
        var sealed = value.fieldObject()
        // Seconds since Foundation's reference date, which is what a Date holds: through 1970
        // a date would not always come back bit for bit.
        if let exactDates { sealed[Self.exactDatesKey] = .array(exactDates.map { .double($0.timeIntervalSinceReferenceDate) }) }
        let plain = Data(JSON.object(sealed).text.utf8)
        do {
            let box = try AES.GCM.seal(plain, using: key, authenticating: Self.bound(recordName, field))
            guard let combined = box.combined else { throw CKError(.internalError, "AES-GCM gave no combined ciphertext") }
            let ciphertext = Data([Self.version]) + keyID + combined
            return .encrypted(value.type, ciphertext.base64EncodedString())
        } catch let error as CKError {
            throw error
        } catch {
            throw CKError(.internalError, "field '\(field)': encrypting failed: \(error)")
        }
    }

    static let exactDatesKey = "exactDates"

    /// The plain value of a ciphertext the server returned, with the exact dates sealed with it.
    func open(_ base64: String, recordName: String, key field: String) throws(CKError) -> (value: FieldValue, exactDates: [Date]?) {
        guard let bytes = Data(base64Encoded: base64), bytes.count > 1 + Self.keyIDBytes + 12 + 16,
            bytes[bytes.startIndex] == Self.version
        else {
            throw CKError(.serverResponseLost, "encrypted field '\(field)' of record '\(recordName)' is not a NimbusKit ciphertext")
        }
        let body = bytes.dropFirst()
        guard let key = openingKeys[Data(body.prefix(Self.keyIDBytes))] else {
            throw CKError(
                .zoneNotFound,
                "encrypted field '\(field)' of record '\(recordName)' was encrypted with a key this device does not hold: the user's key was reset, or this device has not received it yet (another of the user's devices shares it when it next syncs; a shared zone's key comes with the share's URL; docs/encryption.md)",
                userInfo: [CKErrorUserDidResetEncryptedDataKey: NSNumber(value: true)])
        }
        let plain: Data
        do {
            plain = try AES.GCM.open(
                AES.GCM.SealedBox(combined: body.dropFirst(Self.keyIDBytes)), using: key, authenticating: Self.bound(recordName, field))
        } catch {
            throw CKError(
                .serverResponseLost, "encrypted field '\(field)' of record '\(recordName)' does not authenticate: it was changed after it was encrypted")
        }
        do {
            guard case .object(let object) = try JSON.parse(String(decoding: plain, as: UTF8.self)),
                let typeName = object[WireKey.type]?.stringValue, case .exact(let type)? = DeclaredFieldType(wire: typeName),
                let value = object[WireKey.value]
            else { throw CloudKitError.badRequest("not a field") }
            let exactDates = object[Self.exactDatesKey]?.arrayValue?.compactMap { $0.doubleValue.map(Date.init(timeIntervalSinceReferenceDate:)) }
            return (try FieldValue.decode(value, as: type, path: field), exactDates)
        } catch {
            throw CKError(.serverResponseLost, "encrypted field '\(field)' of record '\(recordName)' opened, but holds no field value")
        }
    }

    private static func bound(_ recordName: String, _ field: String) -> Data {
        Data("\(recordName)\u{0}\(field)".utf8)
    }
}

/// The key of `encryptedValues` lives in `userInfo` of a `zoneNotFound` error when the data
/// was encrypted with a key this device does not hold (CloudKit: the user reset their
/// encrypted data). An `NSNumber` holding `true`.
public let CKErrorUserDidResetEncryptedDataKey = "CKErrorUserDidResetEncryptedDataKey"
