/// The admin API's operations bodies (docs/operations.md): the request log and its numbers,
/// backups, and time travel.

/// One request as the log keeps it: the dashboard's rows, `GET requests`, and each line of an
/// export (JSON lines: `jq`, log shippers and spreadsheets read it as it is).
public struct RequestLogEntry: WireBody, Hashable {
    /// The lasting log's row id (0: only in this node's memory, not numbered).
    public var id: Int64
    public var at: Int64
    public var uuid: String
    public var method: String
    public var route: String
    public var status: Int64
    /// Milliseconds spent, to two decimals.
    public var ms: Double
    /// The node that served it.
    public var node: String
    public var container: String?
    public var environment: String?
    public var database: String?
    /// The user record name of the caller.
    public var user: String?
    public var userName: String?
    public var serverErrorCode: String?
    /// The codes of the items that failed inside a 200 (a batch's conflicts).
    public var itemErrorCodes: [String]

    public init(
        id: Int64, at: Int64, uuid: String, method: String, route: String, status: Int64, ms: Double, node: String, container: String?,
        environment: String?, database: String?, user: String?, userName: String?, serverErrorCode: String?, itemErrorCodes: [String]
    ) {
        self.id = id
        self.at = at
        self.uuid = uuid
        self.method = method
        self.route = route
        self.status = status
        self.ms = ms
        self.node = node
        self.container = container
        self.environment = environment
        self.database = database
        self.user = user
        self.userName = userName
        self.serverErrorCode = serverErrorCode
        self.itemErrorCodes = itemErrorCodes
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        id = try json.int(ConsoleKey.id) ?? 0
        at = try json.int(ConsoleKey.at) ?? 0
        uuid = try json.requiredString(ConsoleKey.uuid)
        method = try json.requiredString(ConsoleKey.method)
        route = try json.requiredString(ConsoleKey.route)
        status = try json.int(ConsoleKey.status) ?? 0
        ms = try json.double(ConsoleKey.ms) ?? 0
        node = try json.string(ConsoleKey.node) ?? ""
        container = try json.string(ConsoleKey.container)
        environment = try json.string(ConsoleKey.environment)
        database = try json.string(ConsoleKey.database)
        user = try json.string(ConsoleKey.user)
        userName = try json.string(ConsoleKey.userName)
        serverErrorCode = try json.string(ConsoleKey.serverErrorCode)
        itemErrorCodes = try json.stringArray(ConsoleKey.itemErrorCodes) ?? []
    }

    public var json: JSON {
        var object: JSONObject = [
            ConsoleKey.at: .int(at), ConsoleKey.uuid: .string(uuid), ConsoleKey.method: .string(method), ConsoleKey.route: .string(route),
            ConsoleKey.status: .int(status), ConsoleKey.ms: .double((ms * 100).rounded() / 100), ConsoleKey.node: .string(node),
        ]
        if id != 0 { object[ConsoleKey.id] = .int(id) }
        if let container { object[ConsoleKey.container] = .string(container) }
        if let environment { object[ConsoleKey.environment] = .string(environment) }
        if let database { object[ConsoleKey.database] = .string(database) }
        if let user { object[ConsoleKey.user] = .string(user) }
        if let userName { object[ConsoleKey.userName] = .string(userName) }
        if let serverErrorCode { object[ConsoleKey.serverErrorCode] = .string(serverErrorCode) }
        if !itemErrorCodes.isEmpty { object[ConsoleKey.itemErrorCodes] = .strings(itemErrorCodes) }
        return .object(object)
    }

    /// The entry and its newline, as an export writes it.
    public var line: [UInt8] { json.serialized() + [UInt8(ascii: "\n")] }
}

/// `GET requests?user=&error=&container=&…`: the log's entries a search finds, newest first.
public struct RequestLogPage: WireBody, Hashable {
    public var requests: [RequestLogEntry]

    public init(requests: [RequestLogEntry]) { self.requests = requests }
    public init(json: ObjectReader) throws(CloudKitError) { requests = try json.list(ConsoleKey.requests) }
    public var json: JSON { [ConsoleKey.requests: requests.json] }
}

/// `GET metrics`: the last hour by minute: requests, latency percentiles, errors by code.
public struct MetricsReport: WireBody, Hashable {
    public struct Minute: WireBody, Hashable {
        public var start: Int64
        public var requests: Int64
        /// Milliseconds; nil for a minute without requests.
        public var p50: Double?
        public var p99: Double?
        public var errors: [String: Int64]

        public init(start: Int64, requests: Int64, p50: Double?, p99: Double?, errors: [String: Int64]) {
            self.start = start
            self.requests = requests
            self.p50 = p50
            self.p99 = p99
            self.errors = errors
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            start = try json.int(ConsoleKey.start) ?? 0
            requests = try json.int(ConsoleKey.requests) ?? 0
            p50 = try json.double(ConsoleKey.p50)
            p99 = try json.double(ConsoleKey.p99)
            errors = [:]
            if let given = try json.object(ConsoleKey.errors) {
                for (code, _) in given.object.pairs { errors[code] = try given.int(code) }
            }
        }

        public var json: JSON {
            var errorObject = JSONObject()
            for (code, count) in errors.sorted(by: { $0.key < $1.key }) { errorObject[code] = .int(count) }
            return [
                ConsoleKey.start: .int(start), ConsoleKey.requests: .int(requests), ConsoleKey.p50: p50.map(JSON.double) ?? .null,
                ConsoleKey.p99: p99.map(JSON.double) ?? .null, ConsoleKey.errors: .object(errorObject),
            ]
        }
    }

    public var minutes: [Minute]

    public init(minutes: [Minute]) { self.minutes = minutes }
    public init(json: ObjectReader) throws(CloudKitError) { minutes = try json.list(ConsoleKey.minutes) }
    public var json: JSON { [ConsoleKey.minutes: minutes.json] }
}

/// `GET storage`: where the server keeps its data, and its read replicas with how far behind
/// each is (docs/scale-out.md, "Read replicas").
public struct StorageStatus: WireBody, Hashable {
    /// One read replica at the moment asked.
    public struct Replica: WireBody, Hashable {
        /// Its host and port.
        public var name: String
        /// Whether it answered its last poll (every 100 ms).
        public var up: Bool
        public var lagBytes: Int64
        public var lagSeconds: Double
        /// Loads it answered since the server started.
        public var reads: Int64

        public init(name: String, up: Bool, lagBytes: Int64, lagSeconds: Double, reads: Int64) {
            self.name = name
            self.up = up
            self.lagBytes = lagBytes
            self.lagSeconds = lagSeconds
            self.reads = reads
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            up = try json.bool(ConsoleKey.up) ?? false
            lagBytes = try json.int(ConsoleKey.lagBytes) ?? 0
            lagSeconds = try json.double(ConsoleKey.lagSeconds) ?? 0
            reads = try json.int(ConsoleKey.reads) ?? 0
        }

        public var json: JSON {
            [
                ConsoleKey.name: .string(name), ConsoleKey.up: .bool(up), ConsoleKey.lagBytes: .int(lagBytes),
                ConsoleKey.lagSeconds: .double(lagSeconds), ConsoleKey.reads: .int(reads),
            ]
        }
    }

    /// One partition users' databases live on (docs/scale-out.md, "Partitions"), the home first.
    public struct Partition: WireBody, Hashable {
        public var name: String
        /// Its catalog number, which fixes its id range (the home's is 0).
        public var number: Int64
        /// Why the server could not reach it the last time it tried; nil when it answers or
        /// was not needed yet.
        public var problem: String?

        public init(name: String, number: Int64, problem: String? = nil) {
            self.name = name
            self.number = number
            self.problem = problem
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            number = try json.int(ConsoleKey.number) ?? 0
            problem = try json.string(ConsoleKey.problem)
        }

        public var json: JSON {
            [ConsoleKey.name: .string(name), ConsoleKey.number: .int(number), ConsoleKey.problem: problem.map(JSON.string) ?? .null]
        }
    }

    /// A database's move between partitions left half-way (`nimbus partitions move`, run
    /// again, finishes it).
    public struct Move: WireBody, Hashable {
        /// "container environment scope database of user N", as an operator reads it.
        public var database: String
        public var source: String
        public var target: String
        /// copy, fence, catch-up, switch or clean.
        public var step: String
        /// Whether its writes are refused until the move is run again.
        public var fenced: Bool

        public init(database: String, source: String, target: String, step: String, fenced: Bool) {
            self.database = database
            self.source = source
            self.target = target
            self.step = step
            self.fenced = fenced
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            database = try json.requiredString(ConsoleKey.database)
            source = try json.requiredString(ConsoleKey.source)
            target = try json.requiredString(ConsoleKey.target)
            step = try json.requiredString(ConsoleKey.step)
            fenced = try json.bool(ConsoleKey.fenced) ?? false
        }

        public var json: JSON {
            [
                ConsoleKey.database: .string(database), ConsoleKey.source: .string(source), ConsoleKey.target: .string(target),
                ConsoleKey.step: .string(step), ConsoleKey.fenced: .bool(fenced),
            ]
        }
    }

    /// The engine and where, as the server's first lines say it ("PostgreSQL at postgres://…").
    public var engine: String
    public var replicas: [Replica]
    /// Empty without partitions.
    public var partitions: [Partition]
    public var moves: [Move]

    public init(engine: String, replicas: [Replica] = [], partitions: [Partition] = [], moves: [Move] = []) {
        self.engine = engine
        self.replicas = replicas
        self.partitions = partitions
        self.moves = moves
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        engine = try json.string(ConsoleKey.engine) ?? ""
        replicas = try json.list(ConsoleKey.replicas)
        partitions = try json.list(ConsoleKey.partitions)
        moves = try json.list(ConsoleKey.moves)
    }

    public var json: JSON {
        [
            ConsoleKey.engine: .string(engine), ConsoleKey.replicas: .array(replicas.map(\.json)),
            ConsoleKey.partitions: .array(partitions.map(\.json)), ConsoleKey.moves: .array(moves.map(\.json)),
        ]
    }
}

/// `GET backups` and `POST backups`' answer: whether the server keeps backups, where and how
/// often, the ones it has, and how the last attempts went.
public struct BackupStatus: WireBody, Hashable {
    public struct Backup: WireBody, Hashable {
        public var name: String
        /// ISO 8601.
        public var takenAt: String
        public var bytes: Int64
        public var nimbusVersion: String

        public init(name: String, takenAt: String, bytes: Int64, nimbusVersion: String) {
            self.name = name
            self.takenAt = takenAt
            self.bytes = bytes
            self.nimbusVersion = nimbusVersion
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            takenAt = try json.string(ConsoleKey.takenAt) ?? ""
            bytes = try json.int(ConsoleKey.bytes) ?? 0
            nimbusVersion = try json.string(ConsoleKey.nimbusVersion) ?? ""
        }

        public var json: JSON {
            [
                ConsoleKey.name: .string(name), ConsoleKey.takenAt: .string(takenAt), ConsoleKey.bytes: .int(bytes),
                ConsoleKey.nimbusVersion: .string(nimbusVersion),
            ]
        }
    }

    /// An attempt: when, and the backup's name and size, or why it failed.
    public struct Attempt: WireBody, Hashable {
        public var at: Int64
        public var name: String?
        public var bytes: Int64?
        public var reason: String?

        public init(at: Int64, name: String? = nil, bytes: Int64? = nil, reason: String? = nil) {
            self.at = at
            self.name = name
            self.bytes = bytes
            self.reason = reason
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            at = try json.int(ConsoleKey.at) ?? 0
            name = try json.string(ConsoleKey.name)
            bytes = try json.int(ConsoleKey.bytes)
            reason = try json.string(ConsoleKey.reason)
        }

        public var json: JSON {
            var object: JSONObject = [ConsoleKey.at: .int(at)]
            if let name { object[ConsoleKey.name] = .string(name) }
            if let bytes { object[ConsoleKey.bytes] = .int(bytes) }
            if let reason { object[ConsoleKey.reason] = .string(reason) }
            return .object(object)
        }
    }

    /// Nil: the server was started without `--backup-dir`.
    public var directory: String?
    public var keep: Int64
    public var running: Bool
    public var failuresInARow: Int64
    public var backups: [Backup]
    public var everySeconds: Int64?
    public var lastSuccess: Attempt?
    public var lastFailure: Attempt?

    public init(
        directory: String?, keep: Int64 = 0, running: Bool = false, failuresInARow: Int64 = 0, backups: [Backup] = [],
        everySeconds: Int64? = nil, lastSuccess: Attempt? = nil, lastFailure: Attempt? = nil
    ) {
        self.directory = directory
        self.keep = keep
        self.running = running
        self.failuresInARow = failuresInARow
        self.backups = backups
        self.everySeconds = everySeconds
        self.lastSuccess = lastSuccess
        self.lastFailure = lastFailure
    }

    /// A server that keeps no backups.
    public static let notConfigured = BackupStatus(directory: nil)

    public var configured: Bool { directory != nil }

    public init(json: ObjectReader) throws(CloudKitError) {
        directory = try json.string(ConsoleKey.directory)
        keep = try json.int(ConsoleKey.keep) ?? 0
        running = try json.bool(ConsoleKey.running) ?? false
        failuresInARow = try json.int(ConsoleKey.failuresInARow) ?? 0
        backups = try json.list(ConsoleKey.backups)
        everySeconds = try json.int(ConsoleKey.everySeconds)
        lastSuccess = try json.object(ConsoleKey.lastSuccess).map { reader throws(CloudKitError) in try Attempt(json: reader) }
        lastFailure = try json.object(ConsoleKey.lastFailure).map { reader throws(CloudKitError) in try Attempt(json: reader) }
    }

    public var json: JSON {
        guard self != Self.notConfigured else { return [ConsoleKey.configured: .bool(false)] }
        var object: JSONObject = [
            ConsoleKey.configured: .bool(configured), ConsoleKey.keep: .int(keep), ConsoleKey.running: .bool(running),
            ConsoleKey.failuresInARow: .int(failuresInARow), ConsoleKey.backups: backups.json,
        ]
        if let directory { object[ConsoleKey.directory] = .string(directory) }
        if let everySeconds { object[ConsoleKey.everySeconds] = .int(everySeconds) }
        if let lastSuccess { object[ConsoleKey.lastSuccess] = lastSuccess.json }
        if let lastFailure { object[ConsoleKey.lastFailure] = lastFailure.json }
        return .object(object)
    }
}

/// `POST containers/C/time-travel/ENV`: a moment to go back to (ISO 8601), a user (their
/// private database; the public database without one), a zone (every zone without one), and
/// whether to apply (else a preview).
public struct TimeTravelRequest: WireBody, Hashable {
    public var to: String
    public var user: String?
    public var zone: String?
    public var apply: Bool

    public init(to: String, user: String? = nil, zone: String? = nil, apply: Bool = false) {
        self.to = to
        self.user = user
        self.zone = zone
        self.apply = apply
    }

    /// An empty user or zone reads as none (a form's empty field).
    public init(json: ObjectReader) throws(CloudKitError) {
        to = try json.requiredString(ConsoleKey.to)
        user = try json.string(ConsoleKey.user).flatMap { $0.isEmpty ? nil : $0 }
        zone = try json.string(ConsoleKey.zone).flatMap { $0.isEmpty ? nil : $0 }
        apply = try json.bool(ConsoleKey.apply) ?? false
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.to: .string(to), ConsoleKey.apply: .bool(apply)]
        if let user { object[ConsoleKey.user] = .string(user) }
        if let zone { object[ConsoleKey.zone] = .string(zone) }
        return .object(object)
    }
}

/// What going back changes (or changed), zone by zone: each record's change, and the records
/// that cannot go back, with why.
public struct TimeTravelReport: WireBody, Hashable {
    public struct Change: WireBody, Hashable {
        public var recordName: String
        public var recordType: String
        /// `restore`, `revert` or `delete`: what happens to the record.
        public var change: String

        public init(recordName: String, recordType: String, change: String) {
            self.recordName = recordName
            self.recordType = recordType
            self.change = change
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            recordName = try json.requiredString(ConsoleKey.recordName)
            recordType = try json.string(ConsoleKey.recordType) ?? ""
            change = try json.requiredString(ConsoleKey.change)
        }

        public var json: JSON {
            [ConsoleKey.recordName: .string(recordName), ConsoleKey.recordType: .string(recordType), ConsoleKey.change: .string(change)]
        }
    }

    public struct Skipped: WireBody, Hashable {
        public var recordName: String
        public var reason: String

        public init(recordName: String, reason: String) {
            self.recordName = recordName
            self.reason = reason
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            recordName = try json.requiredString(ConsoleKey.recordName)
            reason = try json.string(ConsoleKey.reason) ?? ""
        }

        public var json: JSON { [ConsoleKey.recordName: .string(recordName), ConsoleKey.reason: .string(reason)] }
    }

    public struct Zone: WireBody, Hashable {
        public var zone: String
        public var changes: [Change]
        public var skipped: [Skipped]

        public init(zone: String, changes: [Change], skipped: [Skipped]) {
            self.zone = zone
            self.changes = changes
            self.skipped = skipped
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            zone = try json.requiredString(ConsoleKey.zone)
            changes = try json.list(ConsoleKey.changes)
            skipped = try json.list(ConsoleKey.skipped)
        }

        public var json: JSON { [ConsoleKey.zone: .string(zone), ConsoleKey.changes: changes.json, ConsoleKey.skipped: skipped.json] }
    }

    /// The moment, ISO 8601 and in milliseconds.
    public var to: String
    public var toMilliseconds: Int64
    /// The oldest moment the kept history reaches.
    public var oldestAvailable: String
    public var applied: Bool
    public var zones: [Zone]

    public init(to: String, toMilliseconds: Int64, oldestAvailable: String, applied: Bool, zones: [Zone]) {
        self.to = to
        self.toMilliseconds = toMilliseconds
        self.oldestAvailable = oldestAvailable
        self.applied = applied
        self.zones = zones
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        to = try json.requiredString(ConsoleKey.to)
        toMilliseconds = try json.int(ConsoleKey.toMilliseconds) ?? 0
        oldestAvailable = try json.string(ConsoleKey.oldestAvailable) ?? ""
        applied = try json.bool(ConsoleKey.applied) ?? false
        zones = try json.list(ConsoleKey.zones)
    }

    public var json: JSON {
        [
            ConsoleKey.to: .string(to), ConsoleKey.toMilliseconds: .int(toMilliseconds), ConsoleKey.oldestAvailable: .string(oldestAvailable),
            ConsoleKey.applied: .bool(applied), ConsoleKey.zones: zones.json,
        ]
    }
}
