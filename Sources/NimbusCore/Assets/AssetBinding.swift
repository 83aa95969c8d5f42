import Crypto
import NimbusStorage
import NimbusWire

/// Asset values in a record's save (docs/assets.md): each one the request sets must carry a
/// receipt that vouches for its bytes in this database and field, unless the record's field
/// holds those bytes already (a client sending back what it fetched). Stored values keep only
/// `fileChecksum` and `size` (and the keys clients send for encryption); the record's asset
/// references, written with it, keep its blobs from collection and count in its quota.
struct AssetBinding {
    let key: DatabaseKey
    let recordType: String
    let recordName: String
    /// Where the record is in the request, for errors (`operations[0].record`): spelled out
    /// for one only.
    let path: () -> String
    let receiptKey: SymmetricKey
    let now: Int64

    /// Checks and rewrites the asset values of the fields named in `changed`; returns every
    /// asset reference the record holds afterwards. `previous`: what it held before the save.
    func bind(_ fields: inout RecordCodec.Fields, changed: [String], previous: [AssetReferenceRow]) throws
        -> [AssetReferenceRow]
    {
        // Asked only of asset fields: most records hold none, and their saves skip all of it.
        func held(_ name: String) -> Set<String>? {
            guard changed.contains(name) else { return nil }
            return Set(previous.lazy.filter { $0.fieldName == name }.map(\.checksum))
        }
        for index in fields.indices {
            let name = fields[index].name
            switch fields[index].value {
            case .asset(let asset):
                guard let held = held(name) else { continue }
                fields[index].value = .asset(try bindOne(asset, field: name, position: nil, held: held))
            case .list(.asset, let elements):
                guard let held = held(name) else { continue }
                var bound: [FieldValue] = []
                for (position, element) in elements.enumerated() {
                    guard case .asset(let asset) = element else { continue }
                    bound.append(.asset(try bindOne(asset, field: name, position: position, held: held)))
                }
                fields[index].value = .list(.asset, bound)
            default: continue
            }
        }
        return RecordCodec.assetReferences(in: fields)
    }

    private func bindOne(_ asset: Asset, field: String, position: Int?, held: Set<String>) throws -> Asset {
        let at = "\(path()).fields.\(field).value" + (position.map { "[\($0)]" } ?? "")
        func refuse(_ reason: String) -> CloudKitError { CloudKitError(.badRequest, "\(at): \(reason)", recordName: recordName) }
        guard let checksum = asset.fileChecksum, let size = asset.size else {
            throw refuse("an asset needs its fileChecksum and size, as the upload's singleFile gives them")
        }
        // Bytes the field holds already need no receipt (a client sending back what it
        // fetched, or a receipt that expired since the save that bound them).
        if held.contains(checksum) { return asset.stored }
        guard let receipt = asset.receipt else {
            throw refuse(
                "this asset has no receipt and the record does not hold it already; upload its file (assets/upload) or copy it from a record that holds it (assets/rereference)"
            )
        }
        let grant: AssetGrant
        do {
            grant = try AssetGrant.open(receipt, key: receiptKey, now: now)
        } catch .forged {
            throw refuse("the receipt was not issued by this server or was altered")
        } catch .expired(let at) {
            throw refuse("the receipt expired \((now - at) / 1000) s ago; upload the file again or rereference it")
        }
        guard grant.container == key.container, grant.environment == key.environment, grant.scope == key.scope,
            grant.ownerID == key.ownerID
        else {
            throw refuse("the receipt is for another container, environment or database; upload the file to this one")
        }
        if let type = grant.recordType, let name = grant.fieldName, type != recordType || name != field {
            throw refuse(
                "the receipt is for field '\(name)' of '\(type)' records, not field '\(field)' of '\(recordType)'; ask assets/upload for this field"
            )
        }
        guard grant.checksum == checksum, grant.size == size else {
            throw refuse("fileChecksum and size are not the ones the receipt vouches for; send them as the upload answered")
        }
        return asset.stored
    }
}
