import NimbusStorage
import NimbusWire

/// A user's sealed keys (docs/encryption.md, "Keys between devices and with participants"):
/// `keys/list` and `keys/modify` in the private database. The server keeps what devices send
/// and hands it back to the same user; it holds no key that opens any of it, so it checks
/// shapes, sizes and the one rule that keeps devices honest with each other: a key sealed for
/// a device must be sealed for the public key that device has now.
extension NimbusService {
    public func sealedKeys(_ target: DatabaseTarget) async throws -> SealedKeysResponse {
        let owner = try sealedKeyOwner(target)
        return SealedKeysResponse(keys: try await storage.push.sealedKeys(owner: owner).map(Self.wire))
    }

    public func modifySealedKeys(_ target: DatabaseTarget, _ request: SealedKeysModifyRequest) async throws -> SealedKeysResponse {
        let owner = try sealedKeyOwner(target)
        var kept: [String: SealedKeyRow] = [:]
        for row in try await storage.push.sealedKeys(owner: owner) { kept["\(row.kind)/\(row.name)"] = row }
        var rows: [SealedKeyRow] = []
        for (index, key) in request.keys.enumerated() {
            let id = "\(key.kind.rawValue)/\(key.name)"
            var row = SealedKeyRow(
                owner: owner, kind: key.kind.rawValue, name: key.name, publicKey: key.publicKey, sealed: key.sealed,
                sealedBy: key.sealedBy, updatedAt: now)
            if key.kind == .device {
                let current = kept[id]
                if key.sealed != nil, key.sealedBy != key.name {
                    // Sealed by another device for the key it listed: that key must still be the
                    // device's. (A device holding the user's key registers with it sealed for itself.)
                    guard let current, current.publicKey == key.publicKey else {
                        throw CloudKitError(
                            .conflict,
                            "keys[\(index)]: device '\(Names.escaped(key.name))' \(current == nil ? "is not registered" : "has another public key now"); list the keys again and seal for the one it has")
                    }
                } else if let current, current.publicKey == key.publicKey {
                    // A device registering again keeps what was sealed for it.
                    row.sealed = current.sealed
                    row.sealedBy = current.sealedBy
                }
            }
            kept[id] = row
            rows.append(row)
        }
        guard kept.count <= Limits.sealedKeysPerUser.value else {
            throw CloudKitError.limitExceeded(Limits.sealedKeysPerUser, actual: kept.count, what: "sealed keys of one user")
        }
        try await storage.push.putSealedKeys(rows)
        return SealedKeysResponse(keys: kept.values.sorted { ($0.kind, $0.name) < ($1.kind, $1.name) }.map(Self.wire))
    }

    private func sealedKeyOwner(_ target: DatabaseTarget) throws -> NotificationOwner {
        guard target.scope == .private else {
            throw CloudKitError.badRequest("sealed keys are the signed-in user's own: use the private database")
        }
        return try notificationOwner(target.caller, for: "Keeping sealed keys")
    }

    private static func wire(_ row: SealedKeyRow) -> SealedKey {
        SealedKey(
            kind: SealedKey.Kind(rawValue: row.kind) ?? .device, name: row.name, publicKey: row.publicKey, sealed: row.sealed,
            sealedBy: row.sealedBy)
    }
}
