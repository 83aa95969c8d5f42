#if canImport(Security)
import Foundation
import Security

/// Keys in the keychain: the default store on Apple platforms. Each key is a generic password
/// (service `service`, account `<container>/<user>`), readable after the device's first unlock
/// so background sync can use it, and kept to this device: it moves to the user's other
/// devices by `exportEncryptionKey()` / `importEncryptionKey(_:)`, as on every platform.
///
/// Written for Apple platforms and not compiled on the Linux machines Nimbus is tested on
/// (docs/sdk.md, "Apple platforms").
public final class NimbusKeychainKeyStore: NimbusEncryptionKeyStore, @unchecked Sendable {
    public let service: String
    /// A keychain access group to share keys with the app's extensions; nil: the app's own.
    public let accessGroup: String?

    public init(service: String = "NimbusKit.EncryptionKeys", accessGroup: String? = nil) {
        self.service = service
        self.accessGroup = accessGroup
    }

    public func encryptionKey(containerIdentifier: String, userRecordName: String) throws -> Data? {
        var query = self.query(containerIdentifier, userRecordName)
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var item: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &item)
        switch status {
        case errSecSuccess:
            guard let key = item as? Data, key.count == FieldCipher.keyBytes else {
                throw CKError(.internalError, "the keychain item \(service)/\(containerIdentifier)/\(userRecordName) does not hold a 32-byte key")
            }
            return key
        case errSecItemNotFound:
            return nil
        default:
            throw CKError(.internalError, "the keychain did not give the encryption key (OSStatus \(status))")
        }
    }

    public func setEncryptionKey(_ key: Data, containerIdentifier: String, userRecordName: String) throws {
        let query = self.query(containerIdentifier, userRecordName)
        let attributes: [String: Any] = [
            kSecValueData as String: key,
            kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly,
        ]
        var status = SecItemUpdate(query as CFDictionary, attributes as CFDictionary)
        if status == errSecItemNotFound {
            status = SecItemAdd(query.merging(attributes) { _, new in new } as CFDictionary, nil)
        }
        guard status == errSecSuccess else {
            throw CKError(.internalError, "the keychain did not keep the encryption key (OSStatus \(status))")
        }
    }

    private func query(_ containerIdentifier: String, _ userRecordName: String) -> [String: Any] {
        var query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: "\(containerIdentifier)/\(userRecordName)",
        ]
        if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
        return query
    }
}
#endif
