import Crypto
import Foundation

/// Where the keys of `encryptedValues` are kept: one key per user and container. Replace it
/// (`CKContainer.encryptionKeyStore`) to keep keys in a keychain, a secure enclave or an MDM
/// profile; NimbusKit asks it before every first use of a key in a process.
public protocol NimbusEncryptionKeyStore: AnyObject, Sendable {
    /// The 32-byte key, or nil when this device has none yet.
    func encryptionKey(containerIdentifier: String, userRecordName: String) throws -> Data?
    func setEncryptionKey(_ key: Data, containerIdentifier: String, userRecordName: String) throws
}

/// Keys as files readable by their owner only (mode 0600, in a 0700 folder): the default on
/// Linux, and on Apple platforms when `NimbusConfiguration.encryptionKeyDirectory` is set
/// (otherwise `NimbusKeychainKeyStore`).
public final class NimbusFileKeyStore: NimbusEncryptionKeyStore, @unchecked Sendable {
    public let directory: URL
    private let lock = NSLock()

    public init(directory: URL) { self.directory = directory }

    /// `Application Support/NimbusKit/EncryptionKeys` (on Linux, `~/.local/share/…`).
    public static var defaultDirectory: URL {
        let base =
            FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".nimbus")
        return base.appendingPathComponent("NimbusKit/EncryptionKeys", isDirectory: true)
    }

    public func encryptionKey(containerIdentifier: String, userRecordName: String) throws -> Data? {
        let file = self.file(containerIdentifier, userRecordName)
        return try lock.withLock {
            guard FileManager.default.fileExists(atPath: file.path) else { return nil }
            let text = try String(contentsOf: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let key = Data(base64Encoded: text), key.count == FieldCipher.keyBytes else {
                throw CKError(.internalError, "the encryption key file \(file.path) is damaged: it does not hold a 32-byte key in base64")
            }
            return key
        }
    }

    public func setEncryptionKey(_ key: Data, containerIdentifier: String, userRecordName: String) throws {
        let file = self.file(containerIdentifier, userRecordName)
        try lock.withLock {
            let folder = file.deletingLastPathComponent()
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder.path)
            // Written beside, owner-only from the start, then moved over: never a moment when the
            // key is readable by others or half written.
            let temporary = folder.appendingPathComponent(".\(UUID().uuidString).tmp")
            guard FileManager.default.createFile(
                atPath: temporary.path, contents: Data(key.base64EncodedString().utf8), attributes: [.posixPermissions: 0o600])
            else { throw CKError(.internalError, "cannot write the encryption key file in \(folder.path)") }
            if FileManager.default.fileExists(atPath: file.path) { try FileManager.default.removeItem(at: file) }
            try FileManager.default.moveItem(at: temporary, to: file)
        }
    }

    private func file(_ container: String, _ user: String) -> URL {
        func safe(_ name: String) -> String {
            name.addingPercentEncoding(withAllowedCharacters: CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-_."))) ?? name
        }
        return directory.appendingPathComponent(safe(container), isDirectory: true).appendingPathComponent("\(safe(user)).key")
    }
}

/// A container's keys of encrypted values, per signed-in user (docs/encryption.md):
/// - the user's key, from the key store (made the first time a user encrypts on a device when
///   none of their devices holds one; otherwise it comes sealed from one that does, `KeyMailbox`);
/// - the key of each of the user's own zones, derived from the user's key, so a zone's key can
///   travel with a share of it without opening anything else;
/// - keys of zones shared with the user, which came with a share's URL;
/// - this device's key pair, for receiving the user's key from their other devices.
final class FieldCiphers: @unchecked Sendable {
    private let containerIdentifier: String
    private let lock = NSLock()
    private var store_: any NimbusEncryptionKeyStore
    private var userKeys: [String: Data] = [:]
    /// Keys of zones shared with the user, by user and `<owner>/<zone>`.
    private var sharedZoneKeys: [String: [String: Data]] = [:]
    /// Users whose encrypted values this device met without the key to open them
    /// (`KeyMailbox.lookAfterKeys` then asks the mailbox).
    private var missingKeys: Set<String> = []

    func isMissingKey(user: String) -> Bool { lock.withLock { missingKeys.contains(user) } }
    func clearMissingKey(user: String) { _ = lock.withLock { missingKeys.remove(user) } }

    init(containerIdentifier: String, store: any NimbusEncryptionKeyStore) {
        self.containerIdentifier = containerIdentifier
        self.store_ = store
    }

    var store: any NimbusEncryptionKeyStore {
        get { lock.withLock { store_ } }
        set {
            lock.withLock {
                store_ = newValue
                userKeys = [:]
            }
        }
    }

    /// The user's key: from memory, then the key store; `create` makes one when there is none
    /// (to encrypt), else a missing key is the "reset" error (to decrypt there is nothing to make).
    func userKey(user: String?, create: Bool) throws(CKError) -> Data {
        guard let user else {
            throw CKError(.notAuthenticated, "encrypted values need a signed-in user: their key belongs to the user (sign in first)")
        }
        lock.lock()
        defer { lock.unlock() }
        do {
            if let key = userKeys[user] { return key }
            let key: Data
            if let stored = try store_.encryptionKey(containerIdentifier: containerIdentifier, userRecordName: user) {
                key = stored
            } else if create {
                key = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
                try store_.setEncryptionKey(key, containerIdentifier: containerIdentifier, userRecordName: user)
            } else {
                missingKeys.insert(user)
                throw CKError(
                    .zoneNotFound,
                    "this device holds no key for this user's encrypted values yet: another of the user's devices shares it when it next syncs (or import it, CKContainer.importEncryptionKey; docs/encryption.md)",
                    userInfo: [CKErrorUserDidResetEncryptedDataKey: NSNumber(value: true)])
            }
            userKeys[user] = key
            return key
        } catch {
            throw CKError.wrapping(error)
        }
    }

    /// The user's key when this device holds it; asking notes nothing as missing.
    func heldUserKey(user: String) -> Data? {
        lock.withLock {
            if let key = userKeys[user] { return key }
            guard let stored = try? store_.encryptionKey(containerIdentifier: containerIdentifier, userRecordName: user) else { return nil }
            userKeys[user] = stored
            return stored
        }
    }

    func holdsUserKey(user: String) -> Bool { heldUserKey(user: user) != nil }

    /// Keeps the user's key another device sealed for this one (or the user imported).
    func receiveUserKey(_ key: Data, user: String) throws(CKError) {
        do {
            try lock.withLock {
                try store_.setEncryptionKey(key, containerIdentifier: containerIdentifier, userRecordName: user)
                userKeys[user] = key
            }
        } catch {
            throw CKError.wrapping(error)
        }
    }

    /// The key of a zone shared with `user`, when this device has it.
    func sharedZoneKey(user: String, zone: String) -> Data? { lock.withLock { sharedZoneKeys[user]?[zone] } }

    func receiveSharedZoneKey(_ key: Data, user: String, zone: String) {
        lock.withLock { sharedZoneKeys[user, default: [:]][zone] = key }
    }

    /// `<owner>/<zone>`: how a shared zone's key is named.
    static func zoneName(_ zoneID: CKRecordZone.ID) -> String { "\(zoneID.ownerName)/\(zoneID.zoneName)" }

    /// The key of one of the user's own zones: derived from the user's key and the zone's name,
    /// so the user's devices agree on it and it opens nothing outside the zone.
    static func ownZoneKey(userKey: Data, user: String, zoneName: String) -> Data {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: userKey), salt: Data("nimbus-zone-key".utf8),
            info: Data("\(user)\u{0}\(zoneName)".utf8), outputByteCount: FieldCipher.keyBytes
        ).withUnsafeBytes { Data($0) }
    }

    /// The cipher of a zone: a zone of the user's own seals with its derived key (and opens
    /// values the user's key sealed before zones had keys); the default zone, which is never
    /// shared, with the user's key; a zone shared with the user with the key its share brought.
    func cipher(zone: CKRecordZone.ID, user: String?, create: Bool) throws(CKError) -> FieldCipher {
        let owner = zone.ownerName
        if owner == CKCurrentUserDefaultName || owner == user {
            let key = try userKey(user: user, create: create)
            guard !zone.isDefaultZone, let user else { return FieldCipher(keyData: key) }
            return FieldCipher(keyData: Self.ownZoneKey(userKey: key, user: user, zoneName: zone.zoneName), alsoOpensWith: [key])
        }
        guard let user else {
            throw CKError(.notAuthenticated, "encrypted values need a signed-in user: their key belongs to the user (sign in first)")
        }
        guard let key = sharedZoneKey(user: user, zone: Self.zoneName(zone)) else {
            _ = lock.withLock { missingKeys.insert(user) }
            throw CKError(
                .zoneNotFound,
                "this device has no key for the encrypted values of zone '\(zone.zoneName)' shared by '\(owner)': it comes with the share's URL (open it on this device or another of the user's; docs/encryption.md)",
                userInfo: [CKErrorUserDidResetEncryptedDataKey: NSNumber(value: true)])
        }
        return FieldCipher(keyData: key)
    }

    /// This device's X25519 key pair for the user, made on first use and kept in the key store.
    func deviceKey(user: String) throws(CKError) -> Curve25519.KeyAgreement.PrivateKey {
        let name = "\(user)#device"
        do {
            return try lock.withLock {
                if let raw = try store_.encryptionKey(containerIdentifier: containerIdentifier, userRecordName: name) {
                    return try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: raw)
                }
                let key = Curve25519.KeyAgreement.PrivateKey()
                try store_.setEncryptionKey(key.rawRepresentation, containerIdentifier: containerIdentifier, userRecordName: name)
                return key
            }
        } catch {
            throw CKError.wrapping(error)
        }
    }

    /// The key to carry to another device: `NIMBUSKEY1.<container>.<user>.<key>`, each part
    /// base64url. Anyone holding it reads the user's encrypted values: handle it as a password.
    func export(user: String?) throws(CKError) -> String {
        guard let user else { throw CKError(.notAuthenticated, "sign in before exporting an encryption key: it belongs to a user") }
        let key = try userKey(user: user, create: true)  // makes the key when this device has none
        return [Self.prefix, Self.encode(Data(containerIdentifier.utf8)), Self.encode(Data(user.utf8)), Self.encode(key)]
            .joined(separator: ".")
    }

    /// Stores a key exported on another device; refuses one of another container or user.
    func importKey(_ text: String, user: String?) throws(CKError) {
        guard let user else { throw CKError(.notAuthenticated, "sign in before importing an encryption key: it belongs to a user") }
        let parts = text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == Self.prefix, let container = Self.decode(parts[1]), let owner = Self.decode(parts[2]),
            let key = Self.decode(parts[3]), key.count == FieldCipher.keyBytes
        else {
            throw CKError(.invalidArguments, "this is not an exported NimbusKit encryption key (expected NIMBUSKEY1.<container>.<user>.<key>)")
        }
        guard String(decoding: container, as: UTF8.self) == containerIdentifier else {
            throw CKError(
                .invalidArguments, "this key belongs to container '\(String(decoding: container, as: UTF8.self))', not '\(containerIdentifier)'")
        }
        guard String(decoding: owner, as: UTF8.self) == user else {
            throw CKError(.invalidArguments, "this key belongs to another user than the one signed in")
        }
        try receiveUserKey(key, user: user)
    }

    private static let prefix = "NIMBUSKEY1"

    private static func encode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func decode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
