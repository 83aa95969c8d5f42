import NimbusCore
import NimbusWire

/// The signed-in user's sealed keys (docs/encryption.md), under
/// `/database/1/{container}/{environment}/private/`:
///
/// | path | service |
/// |---|---|
/// | `keys/list` | `sealedKeys` |
/// | `keys/modify` | `modifySealedKeys` |
enum KeyRoutes {
    static let routes: [Route] = [
        .json("keys/list", .reads) { try await $0.service.sealedKeys($0.target) },
        .json("keys/modify") { try await $0.service.modifySealedKeys($0.target, SealedKeysModifyRequest(json: $0.body())) },
    ]
}
