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

/// A container's ciphers, one per user, made from the key store on first use (a key is made
/// and stored the first time a user encrypts on a device that has none).
final class FieldCiphers: @unchecked Sendable {
    private let containerIdentifier: String
    private let lock = NSLock()
    private var store_: any NimbusEncryptionKeyStore
    private var ciphers: [String: FieldCipher] = [:]

    init(containerIdentifier: String, store: any NimbusEncryptionKeyStore) {
        self.containerIdentifier = containerIdentifier
        self.store_ = store
    }

    var store: any NimbusEncryptionKeyStore {
        get { lock.withLock { store_ } }
        set {
            lock.withLock {
                store_ = newValue
                ciphers = [:]
            }
        }
    }

    /// The user's cipher; `create` makes a key when the device has none (to encrypt), else
    /// a missing key is the "reset" error (to decrypt there is nothing to make).
    func cipher(user: String?, create: Bool) throws(CKError) -> FieldCipher {
        guard let user else {
            throw CKError(.notAuthenticated, "encrypted values need a signed-in user: their key belongs to the user (sign in first)")
        }
        lock.lock()
        defer { lock.unlock() }
        do {
            if let cipher = ciphers[user] { return cipher }
            let key: Data
            if let stored = try store_.encryptionKey(containerIdentifier: containerIdentifier, userRecordName: user) {
                key = stored
            } else if create {
                key = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
                try store_.setEncryptionKey(key, containerIdentifier: containerIdentifier, userRecordName: user)
            } else {
                throw CKError(
                    .zoneNotFound,
                    "this device holds no key for this user's encrypted values; import it from another device (CKContainer.importEncryptionKey, docs/encryption.md)",
                    userInfo: [CKErrorUserDidResetEncryptedDataKey: NSNumber(value: true)])
            }
            let cipher = FieldCipher(keyData: key)
            ciphers[user] = cipher
            return cipher
        } catch {
            throw CKError.wrapping(error)
        }
    }

    /// The key to carry to another device: `NIMBUSKEY1.<container>.<user>.<key>`, each part
    /// base64url. Anyone holding it reads the user's encrypted values: handle it as a password.
    func export(user: String?) throws(CKError) -> String {
        guard let user else { throw CKError(.notAuthenticated, "sign in before exporting an encryption key: it belongs to a user") }
        _ = try cipher(user: user, create: true)  // makes the key when this device has none
        let key: Data?
        do {
            key = try store.encryptionKey(containerIdentifier: containerIdentifier, userRecordName: user)
        } catch {
            throw CKError.wrapping(error)
        }
        guard let key else { throw CKError(.internalError, "the key store did not keep the key it was given") }
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
        do {
            try lock.withLock {
                try store_.setEncryptionKey(key, containerIdentifier: containerIdentifier, userRecordName: user)
                ciphers[user] = nil
            }
        } catch {
            throw CKError.wrapping(error)
        }
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
