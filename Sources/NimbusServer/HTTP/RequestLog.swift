import Foundation

/// The dashboard's request log and numbers (docs/dashboard.md): the last `capacity` requests
/// this node answered, and per-minute figures for the last hour (requests, latency histogram,
/// errors by `serverErrorCode`, the errors of single items inside a 200 included). In memory,
/// per node; `RequestArchive` stores the entries where the driver keeps a lasting log, and the
/// dashboard then reads that.
///
/// Every request passes through `record`, so it is one lock held for a few stores: no
/// allocation but the entry's strings, no I/O.
final class RequestLog: @unchecked Sendable {
    struct Entry: Sendable {
        var at: Int64
        var requestUUID: String
        var method: String
        var route: String
        var container: String?
        var environment: String?
        /// `public`, `private` or `shared`.
        var database: String?
        /// The user's record name.
        var user: String?
        /// The user's account name.
        var userName: String?
        var status: Int
        var serverErrorCode: String?
        /// Errors of single items inside a 200 (a record's `CONFLICT` in a batch).
        var itemFailureCodes: [String] = []
        var milliseconds: Double
    }

    /// Requests, errors and latency of some traffic.
    struct Figures: Sendable {
        var requests = 0
        /// Requests answered with a 5xx status.
        var serverErrors = 0
        var errors: [String: Int] = [:]
        /// Request durations in buckets `RequestLog.bucketBounds` (the last bucket is open).
        var latency = [Int](repeating: 0, count: RequestLog.bucketBounds.count + 1)

        mutating func count(latencyBucket: Int, status: Int, error: String?, itemErrors: [String]) {
            requests += 1
            if status >= 500 { serverErrors += 1 }
            latency[latencyBucket] += 1
            if let error { errors[error, default: 0] += 1 }
            for code in itemErrors { errors[code, default: 0] += 1 }
        }

        /// Counts an entry of the log.
        mutating func count(_ entry: Entry) {
            count(
                latencyBucket: RequestLog.bucket(entry.milliseconds), status: entry.status, error: entry.serverErrorCode,
                itemErrors: entry.itemFailureCodes)
        }

        mutating func add(_ other: Figures) {
            requests += other.requests
            serverErrors += other.serverErrors
            errors.merge(other.errors, uniquingKeysWith: +)
            for index in latency.indices { latency[index] += other.latency[index] }
        }

        /// The duration under which `fraction` of the requests finished (an upper bound, within 10%).
        func percentile(_ fraction: Double) -> Double? {
            guard requests > 0 else { return nil }
            let wanted = max(1, Int((Double(requests) * fraction).rounded(.up)))
            var seen = 0
            for (index, count) in latency.enumerated() {
                seen += count
                if seen >= wanted { return RequestLog.bucketBounds[min(index, RequestLog.bucketBounds.count - 1)] }
            }
            return nil
        }
    }

    /// One minute of traffic, by container ("" for requests that named none), so an operator
    /// of some containers sees the figures of those only.
    struct Minute: Sendable {
        var start: Int64
        var byContainer: [String: Figures] = [:]
    }

    /// Upper bounds of the latency buckets in milliseconds: 0.05 ms to about 100 s in steps of
    /// 10%, so a percentile is an upper bound within a tenth of the true value.
    static let bucketBounds: [Double] = (0..<153).map { 0.05 * pow(1.1, Double($0)) }
    static let capacity = 10_000
    /// The most bytes an entry keeps of a route or container name (`AccessLog.bounded`).
    static let textBytes = 200
    static let minutes = 60

    /// This node, as the entries it answered name it (its host name, read once).
    static let node = ProcessInfo.processInfo.hostName

    /// Entries a lasting store has not taken yet (`RequestArchive`), at most this many.
    static let unarchivedLimit = 100_000

    private let lock = NSLock()
    private var entries: [Entry] = []
    /// Nil when nothing archives: then nothing is kept twice.
    private var unarchived: [Entry]?
    private var droppedUnarchived = 0
    private var next = 0
    private var perMinute: [Minute] = []

    init() {
        entries.reserveCapacity(Self.capacity)
    }

    /// The latency bucket a request of `milliseconds` falls in.
    static func bucket(_ milliseconds: Double) -> Int { bucketBounds.partitioningIndex { $0 >= milliseconds } }

    func record(_ entry: Entry) {
        let bucket = Self.bucket(entry.milliseconds)
        let minute = entry.at / 60_000 * 60_000
        lock.lock()
        defer { lock.unlock() }
        if entries.count < Self.capacity {
            entries.append(entry)
        } else {
            entries[next] = entry
        }
        next = (next + 1) % Self.capacity
        if unarchived != nil {
            if unarchived!.count < Self.unarchivedLimit { unarchived!.append(entry) } else { droppedUnarchived += 1 }
        }
        if perMinute.last?.start != minute {
            perMinute.append(Minute(start: minute))
            if perMinute.count > Self.minutes { perMinute.removeFirst(perMinute.count - Self.minutes) }
        }
        perMinute[perMinute.count - 1].byContainer[entry.container ?? "", default: Figures()]
            .count(latencyBucket: bucket, status: entry.status, error: entry.serverErrorCode, itemErrors: entry.itemFailureCodes)
    }

    /// From now on, keeps entries for `drainUnarchived`.
    func startArchiving() {
        lock.lock()
        defer { lock.unlock() }
        if unarchived == nil { unarchived = [] }
    }

    /// The entries recorded since the last call, and how many were dropped past the bound.
    func drainUnarchived() -> (entries: [Entry], dropped: Int) {
        lock.lock()
        defer { lock.unlock() }
        let drained = (unarchived ?? [], droppedUnarchived)
        if unarchived != nil { unarchived = [] }
        droppedUnarchived = 0
        return drained
    }

    /// The newest entries first that `keep` accepts, at most `limit`.
    func newest(limit: Int, where keep: (Entry) -> Bool) -> [Entry] {
        lock.lock()
        defer { lock.unlock() }
        var found: [Entry] = []
        var index = next
        for _ in 0..<entries.count {
            index = (index - 1 + entries.count) % entries.count
            if keep(entries[index]) {
                found.append(entries[index])
                if found.count == limit { break }
            }
        }
        return found
    }

    /// The minutes of the last hour that saw requests, oldest first, with the figures of the
    /// containers `visible` accepts.
    func lastHour(now: Int64, visible: (String) -> Bool) -> [(start: Int64, figures: Figures)] {
        lock.lock()
        let minutes = perMinute.filter { $0.start > now - Int64(Self.minutes) * 60_000 }
        lock.unlock()
        return minutes.map { minute in
            var figures = Figures()
            for (container, part) in minute.byContainer where visible(container) { figures.add(part) }
            return (minute.start, figures)
        }
    }
}

extension Array {
    /// The first index whose element satisfies `belongs` (the array is partitioned by it).
    func partitioningIndex(where belongs: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if belongs(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
