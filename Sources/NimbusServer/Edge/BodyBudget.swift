import NimbusWire
import Synchronization

/// Which bound a request's body is held to, chosen from its path before a byte of the body is
/// read: at the edge (a declared length over it is refused at once) and again when a route
/// reads the body (`Request.collectBody`).
struct BodyLimits: Sendable {
    /// One asset's bytes (`nimbus serve --asset-max-bytes`): an upload streams to the blob
    /// store, never held whole.
    var assetBytes: Int

    static let assetUploadPrefix = "/assets/1/upload/"

    /// `path` without its query. Compared byte by byte: `hasPrefix` and `hasSuffix` compare
    /// characters with Unicode's equivalence, 0.9% of a single client's create.
    func limit(forPath path: Substring) -> Limit {
        if Self.streams(path) { return Limit(name: Limits.assetBytes.name, value: assetBytes) }
        if Self.path(path, endsWith: "/records/modify") || (path.utf8.starts(with: "/admin/".utf8) && Self.path(path, endsWith: "/import")) {
            return Limits.modifyRequestBodyBytes
        }
        return Limits.requestBodyBytes
    }

    /// Whether the route streams its body rather than holding it (uploads).
    static func streams(_ path: Substring) -> Bool { path.utf8.starts(with: assetUploadPrefix.utf8) }

    private static func path(_ path: Substring, endsWith suffix: String) -> Bool {
        path.utf8.reversed().starts(with: suffix.utf8.reversed())
    }
}

/// Bytes of request bodies the node holds at once: read, parsed, and alive while their request
/// is answered. Reserved before a body is read (its declared length, or its route's bound when
/// it is chunked), per node, per client address and per caller, so a flood of maximal bodies
/// holds at most `total` (docs/limits.md) however many connections it opens, and one address
/// or one app's API token cannot take all of it. Past a bound the request is refused before
/// its body is read: `THROTTLED` for an address or caller over its share, `TRY_AGAIN_LATER`
/// when the node is, both with `retryAfter`.
final class BodyBudget: Sendable {
    struct Bounds: Sendable {
        var total = Limits.bodyBytesInFlight.value
        var perClient = Limits.bodyBytesPerClient.value
        var perCaller = Limits.bodyBytesPerCaller.value
    }

    /// Bytes held for one body; given back when the last reference goes (the request's
    /// exchange holds it until the answer is built), or when `release` is called.
    final class Reservation: Sendable {
        let budget: BodyBudget
        let client: String?
        let caller: String?
        let bytes: Mutex<Int>

        fileprivate init(budget: BodyBudget, bytes: Int, client: String?, caller: String?) {
            self.budget = budget
            self.bytes = Mutex(bytes)
            self.client = client
            self.caller = caller
        }

        /// Keeps only `bytes` of what was reserved (a chunked body that turned out smaller).
        func shrink(to kept: Int) {
            let freed = bytes.withLock { held in
                let freed = max(0, held - kept)
                held -= freed
                return freed
            }
            if freed > 0 { budget.give(freed, client: client, caller: caller) }
        }

        deinit { shrink(to: 0) }
    }

    private struct Held {
        var total = 0
        var clients: [String: Int] = [:]
        var callers: [String: Int] = [:]
    }

    let bounds: Bounds
    private let held = Mutex(Held())

    init(_ bounds: Bounds = Bounds()) { self.bounds = bounds }

    /// Holds `bytes` for a body from `client` (an address) sent by `caller` (a key naming the
    /// user, server key or API token; nil before authentication).
    func reserve(_ bytes: Int, client: String?, caller: String?) throws(CloudKitError) -> Reservation {
        let refusal: CloudKitError? = held.withLock { held in
            if let client, held.clients[client, default: 0] + bytes > bounds.perClient {
                return Self.refusal(.throttled, "this address", Limits.bodyBytesPerClient, bounds.perClient)
            }
            if let caller, held.callers[caller, default: 0] + bytes > bounds.perCaller {
                return Self.refusal(.throttled, "this caller", Limits.bodyBytesPerCaller, bounds.perCaller)
            }
            guard held.total + bytes <= bounds.total else {
                return Self.refusal(.tryAgainLater, "the server", Limits.bodyBytesInFlight, bounds.total)
            }
            held.total += bytes
            if let client { held.clients[client, default: 0] += bytes }
            if let caller { held.callers[caller, default: 0] += bytes }
            return nil
        }
        if let refusal { throw refusal }
        return Reservation(budget: self, bytes: bytes, client: client, caller: caller)
    }

    /// Bytes held now, in all (tests, diagnostics).
    var total: Int { held.withLock { $0.total } }

    fileprivate func give(_ bytes: Int, client: String?, caller: String?) {
        held.withLock { held in
            held.total -= bytes
            if let client { Self.subtract(bytes, from: &held.clients, key: client) }
            if let caller { Self.subtract(bytes, from: &held.callers, key: caller) }
        }
    }

    private static func subtract(_ bytes: Int, from table: inout [String: Int], key: String) {
        let left = table[key, default: 0] - bytes
        table[key] = left > 0 ? left : nil
    }

    private static func refusal(_ code: ServerErrorCode, _ who: String, _ limit: Limit, _ value: Int) -> CloudKitError {
        var error = CloudKitError(
            code,
            "\(who) has as many bytes of request bodies in flight as it may (\(value), \(limit.name)); wait for earlier requests to be answered, then try again after retryAfter seconds")
        error.retryAfter = 1
        return error
    }
}
