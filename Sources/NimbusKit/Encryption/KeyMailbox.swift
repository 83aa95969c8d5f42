import Crypto
import Foundation
import NimbusWire

/// Moves keys of encrypted values where they are needed, through the server's sealed-key
/// mailbox (`keys/list`, `keys/modify` in the private database), without the app writing any
/// of it and without the server ever holding a key it could use (docs/encryption.md):
///
/// - **Between a user's devices.** Each device has an X25519 key pair (`FieldCiphers.deviceKey`)
///   and registers its public key. A device holding the user's key seals it for every device of
///   the user that has none yet (at most once a minute, before and after its private-database
///   operations); the new device opens it with its private key, which never leaves it.
/// - **With share participants.** A zone's key (`FieldCiphers.ownZoneKey`) travels in the
///   fragment of the share's URL, which browsers and NimbusKit never send to a server. The
///   participant's device keeps it, and leaves it in the mailbox sealed with the participant's
///   own key, so their other devices have it too.
final class KeyMailbox: @unchecked Sendable {
    private let transport: NimbusTransport
    private let ciphers: FieldCiphers
    private let lock = NSLock()
    /// When this device last looked after the user's keys, by user.
    private var checked: [String: Date] = [:]
    /// Users this device registered for and waits for the key of: looked after before every
    /// operation until it comes.
    private var waiting: Set<String> = []
    /// Users whose shared zones' keys were read from the mailbox in this process.
    private var zoneKeysRead: Set<String> = []
    /// Users a background job is looking after now.
    private var busy: Set<String> = []

    /// How often a device holding the key looks for devices that wait for it.
    static let checkInterval: TimeInterval = 60

    init(transport: NimbusTransport, ciphers: FieldCiphers) {
        self.transport = transport
        self.ciphers = ciphers
    }

    /// A device's name in the mailbox: the first 8 bytes of its public key's SHA-256, in hex.
    static func deviceID(_ publicKey: Curve25519.KeyAgreement.PublicKey) -> String {
        SHA256.hash(data: publicKey.rawRepresentation).prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    /// Looks after the signed-in user's keys around a private- or shared-database operation, when
    /// this device uses encrypted values, in the background, delaying nothing: a device that
    /// met values it could not open, or waits for the user's key, asks the mailbox for it; a
    /// device holding the key shares it with devices waiting for it (at once when asked, else
    /// once a minute) and reads shared zones' keys. One such job per user at a time. Best
    /// effort: a failure here fails no operation (the values report the missing key themselves).
    func lookAfterKeys(scope: CKDatabase.Scope) {
        guard scope != .public, let user = transport.userRecordName else { return }
        let holds = ciphers.holdsUserKey(user: user)
        let wanted = lock.withLock { waiting.contains(user) } || ciphers.isMissingKey(user: user)
        let job: (@Sendable () async -> Void)? = lock.withLock {
            guard !busy.contains(user) else { return nil }
            let due = checked[user].map { Date().timeIntervalSince($0) >= Self.checkInterval } ?? true
            if holds, wanted || due || (scope == .shared && !zoneKeysRead.contains(user)) {
                checked[user] = Date()
                return { try? await self.shareWithOtherDevices(user: user) }
            }
            if !holds, wanted { return { _ = try? await self.obtainUserKey(user: user, create: false) } }
            return nil
        }
        guard let job else { return }
        _ = lock.withLock { busy.insert(user) }
        Task {
            await job()
            _ = self.lock.withLock { self.busy.remove(user) }
        }
    }

    /// How long one mailbox request may take.
    static let requestTimeout: TimeInterval = 10

    /// The user's key on this device: kept here; or sealed for this device by another of the
    /// user's; or, with `create` when none of the user's devices holds one, made here. When
    /// another device holds it and has not sealed it for this one yet, this device registers
    /// and the error says the key is on its way.
    func obtainUserKey(user: String, create: Bool) async throws(CKError) -> Data {
        if let key = ciphers.heldUserKey(user: user) { return key }
        let device = try ciphers.deviceKey(user: user)
        let me = Self.deviceID(device.publicKey)
        let keys = try await list()
        let mine = keys.first { $0.kind == .device && $0.name == me }
        if let sealed = mine?.sealed, let bytes = Data(base64Encoded: sealed),
            let key = try? Self.open(bytes, with: device, deviceID: me)
        {
            try ciphers.receiveUserKey(key, user: user)
            readZoneKeys(keys, userKey: key, user: user)
            _ = lock.withLock { waiting.remove(user) }
            ciphers.clearMissingKey(user: user)
            return key
        }
        let holders = keys.filter { $0.kind == .device && $0.sealed != nil && $0.name != me }
        if holders.isEmpty, create {
            let key = try ciphers.userKey(user: user, create: true)
            try await register(device, id: me, sealing: key)
            return key
        }
        if mine?.publicKey != device.publicKey.rawRepresentation.base64EncodedString() {
            try await register(device, id: me, sealing: nil)
        }
        _ = lock.withLock { waiting.insert(user) }
        throw CKError(
            .zoneNotFound,
            "this device does not hold the user's key for encrypted values yet: another of the user's devices holds it and shares it with this one the next time it syncs (docs/encryption.md)",
            userInfo: [CKErrorUserDidResetEncryptedDataKey: NSNumber(value: true)])
    }

    /// As a device holding the user's key: registers itself as one, seals the key for every
    /// device of the user waiting for it, and reads the keys of zones shared with the user.
    func shareWithOtherDevices(user: String) async throws(CKError) {
        let key = try ciphers.userKey(user: user, create: false)
        let device = try ciphers.deviceKey(user: user)
        let me = Self.deviceID(device.publicKey)
        let keys = try await list()
        readZoneKeys(keys, userKey: key, user: user)
        var sealing: [SealedKey] = []
        if !keys.contains(where: { $0.kind == .device && $0.name == me && $0.sealed != nil }) {
            sealing.append(try Self.sealed(key, for: device.publicKey, deviceID: me, by: me))
        }
        for entry in keys where entry.kind == .device && entry.sealed == nil && entry.name != me {
            guard let raw = entry.publicKey.flatMap({ Data(base64Encoded: $0) }),
                let publicKey = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw),
                Self.deviceID(publicKey) == entry.name
            else { continue }  // a device's name is its key's hash: anything else is not one of ours
            sealing.append(try Self.sealed(key, for: publicKey, deviceID: entry.name, by: me))
        }
        if !sealing.isEmpty { _ = try await modify(sealing) }
        lock.withLock { checked[user] = Date() }
        ciphers.clearMissingKey(user: user)
    }

    /// A zone key a share's URL brought: this device uses it at once, and the user's other
    /// devices find it in the mailbox, sealed with the user's key.
    func receiveZoneKey(_ zoneKey: Data, zone: CKRecordZone.ID, user: String) async {
        let name = FieldCiphers.zoneName(zone)
        ciphers.receiveSharedZoneKey(zoneKey, user: user, zone: name)
        guard let userKey = try? await obtainUserKey(user: user, create: true),
            let sealed = try? Self.sealZoneKey(zoneKey, with: userKey, name: name)
        else { return }
        _ = try? await modify([SealedKey(kind: .zone, name: name, sealed: sealed.base64EncodedString())])
    }

    // MARK: The mailbox

    private func list() async throws(CKError) -> [SealedKey] {
        try NimbusTransport.read(SealedKeysResponse.self, from: await transport.database(.private, "keys/list", [:], timeout: Self.requestTimeout), endpoint: "keys/list").keys
    }

    private func modify(_ keys: [SealedKey]) async throws(CKError) -> [SealedKey] {
        try NimbusTransport.read(
            SealedKeysResponse.self,
            from: await transport.database(.private, "keys/modify", SealedKeysModifyRequest(keys: keys).json, timeout: Self.requestTimeout),
            endpoint: "keys/modify"
        ).keys
    }

    private func register(_ device: Curve25519.KeyAgreement.PrivateKey, id: String, sealing key: Data?) async throws(CKError) {
        let entry =
            try key.map { key throws(CKError) in try Self.sealed(key, for: device.publicKey, deviceID: id, by: id) }
            ?? SealedKey(kind: .device, name: id, publicKey: device.publicKey.rawRepresentation.base64EncodedString())
        _ = try await modify([entry])
    }

    private func readZoneKeys(_ keys: [SealedKey], userKey: Data, user: String) {
        for entry in keys where entry.kind == .zone {
            guard let sealed = entry.sealed.flatMap({ Data(base64Encoded: $0) }),
                let zoneKey = try? Self.openZoneKey(sealed, with: userKey, name: entry.name)
            else { continue }
            ciphers.receiveSharedZoneKey(zoneKey, user: user, zone: entry.name)
        }
        _ = lock.withLock { zoneKeysRead.insert(user) }
    }

    // MARK: Sealing

    /// The user's key sealed for one device: an ephemeral X25519 agreement with the device's
    /// public key, HKDF-SHA256 bound to both public keys and the device's name, AES-GCM.
    /// `ephemeral public key (32) ‖ nonce (12) ‖ sealed key ‖ tag (16)`.
    static func seal(_ key: Data, for publicKey: Curve25519.KeyAgreement.PublicKey, deviceID: String) throws -> Data {
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let wrapping = try wrappingKey(
            ephemeral.sharedSecretFromKeyAgreement(with: publicKey), ephemeral: ephemeral.publicKey, recipient: publicKey, deviceID: deviceID)
        guard let combined = try AES.GCM.seal(key, using: wrapping).combined else { throw CKError(.internalError, "AES-GCM gave no ciphertext") }
        return ephemeral.publicKey.rawRepresentation + combined
    }

    static func open(_ sealed: Data, with device: Curve25519.KeyAgreement.PrivateKey, deviceID: String) throws -> Data {
        guard sealed.count > 32 else { throw CKError(.serverResponseLost, "a sealed key is too short") }
        let ephemeral = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: sealed.prefix(32))
        let wrapping = try wrappingKey(
            device.sharedSecretFromKeyAgreement(with: ephemeral), ephemeral: ephemeral, recipient: device.publicKey, deviceID: deviceID)
        return try AES.GCM.open(AES.GCM.SealedBox(combined: sealed.dropFirst(32)), using: wrapping)
    }

    private static func wrappingKey(
        _ secret: SharedSecret, ephemeral: Curve25519.KeyAgreement.PublicKey, recipient: Curve25519.KeyAgreement.PublicKey, deviceID: String
    ) -> SymmetricKey {
        secret.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: ephemeral.rawRepresentation + recipient.rawRepresentation,
            sharedInfo: Data("nimbus-device-key\u{0}\(deviceID)".utf8), outputByteCount: 32)
    }

    private static func sealed(_ key: Data, for publicKey: Curve25519.KeyAgreement.PublicKey, deviceID: String, by sealer: String)
        throws(CKError) -> SealedKey
    {
        do {
            return SealedKey(
                kind: .device, name: deviceID, publicKey: publicKey.rawRepresentation.base64EncodedString(),
                sealed: try seal(key, for: publicKey, deviceID: deviceID).base64EncodedString(), sealedBy: sealer)
        } catch {
            throw CKError(.internalError, "sealing the user's key for device \(deviceID) failed: \(error)")
        }
    }

    /// A shared zone's key sealed with the user's key (a key of its own derived from it),
    /// bound to the zone's name.
    static func sealZoneKey(_ zoneKey: Data, with userKey: Data, name: String) throws -> Data {
        guard let combined = try AES.GCM.seal(zoneKey, using: zoneKeysKey(userKey), authenticating: Data(name.utf8)).combined else {
            throw CKError(.internalError, "AES-GCM gave no ciphertext")
        }
        return combined
    }

    static func openZoneKey(_ sealed: Data, with userKey: Data, name: String) throws -> Data {
        try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: zoneKeysKey(userKey), authenticating: Data(name.utf8))
    }

    private static func zoneKeysKey(_ userKey: Data) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: userKey), salt: Data("nimbus-shared-zone-keys".utf8), info: Data(), outputByteCount: 32)
    }
}

/// A share's zone key in its URL's fragment (`#nk=<base64url>`): handed to participants with
/// the URL, never sent to a server (a URL's fragment is not part of any request).
enum ShareURLKey {
    static let name = "nk"

    static func url(_ url: URL, carrying key: Data) -> URL {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
        let encoded = key.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let others = (components.fragment ?? "").split(separator: "&").filter { !$0.hasPrefix("\(name)=") }
        components.fragment = (others.map(String.init) + ["\(name)=\(encoded)"]).joined(separator: "&")
        return components.url ?? url
    }

    static func key(in url: URL) -> Data? {
        guard let fragment = URLComponents(url: url, resolvingAgainstBaseURL: false)?.fragment else { return nil }
        for part in fragment.split(separator: "&") where part.hasPrefix("\(name)=") {
            var base64 = part.dropFirst(name.count + 1).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while base64.count % 4 != 0 { base64 += "=" }
            if let key = Data(base64Encoded: base64), key.count == FieldCipher.keyBytes { return key }
        }
        return nil
    }
}
