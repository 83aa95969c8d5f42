import NimbusStorage
import NimbusWire
import Synchronization

/// Saves in flight per zone on this node. Writers of one zone queue behind each other in any
/// store (they change the same rows and the same database sequence); past a bound another one
/// would only wait longer and make every other writer of the zone wait too, so it is answered
/// `ZONE_BUSY` with `retryAfter` at once instead (CloudKit's `zoneBusy`).
final class ZoneWriters: Sendable {
    private let writers = Mutex<[String: Int]>([:])

    /// Enters `zone` of `database` unless `bound` writers are in it; `ZONE_BUSY` if they are.
    /// A bound of 0 admits everyone.
    func enter(_ database: DatabaseKey, zone: String, bound: Int) throws(CloudKitError) -> String {
        let key = "\(database.container)\u{0}\(database.environment.rawValue)\u{0}\(database.scope.rawValue)\u{0}\(database.ownerID)\u{0}\(zone)"
        let admitted = writers.withLock { writers in
            let count = writers[key, default: 0]
            guard bound == 0 || count < bound else { return false }
            writers[key] = count + 1
            return true
        }
        guard admitted else {
            var error = CloudKitError(
                .zoneBusy,
                "zone '\(zone)' already has \(bound) saves in progress (writersPerZone, docs/limits.md); nothing was written, try again after retryAfter seconds")
            error.retryAfter = 1
            throw error
        }
        return key
    }

    func leave(_ key: String) {
        writers.withLock { writers in
            let count = writers[key, default: 1] - 1
            writers[key] = count > 0 ? count : nil
        }
    }

    /// Saves in flight in every zone (tests).
    var total: Int { writers.withLock { $0.values.reduce(0, +) } }
}
