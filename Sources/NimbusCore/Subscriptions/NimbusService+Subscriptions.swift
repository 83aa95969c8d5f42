import NimbusStorage
import NimbusWire

/// `subscriptions/list`, `subscriptions/lookup`, `subscriptions/modify`: a user's standing
/// questions about a database. Subscriptions belong to the user who made them, also in the
/// public database, where each subscriber hears of every user's changes.
extension NimbusService {
    /// `subscriptions/list`: the caller's subscriptions to this database.
    public func listSubscriptions(_ target: DatabaseTarget) async throws -> SubscriptionsResponse {
        let user = try target.caller.requireUser(for: "Subscriptions")
        let key = try target.key()
        let database = try await databaseForReading(key)
        let rows = try await storage.read(in: key) { try $0.subscriptions(databaseID: database.id, userID: user.id) }
        return SubscriptionsResponse(subscriptions: try rows.map { .success(.subscription(try Self.definition($0.definition))) })
    }

    /// `subscriptions/lookup`: one entry per ID, in order; unknown IDs as `NOT_FOUND` entries.
    public func lookupSubscriptions(_ target: DatabaseTarget, _ request: SubscriptionsLookupRequest) async throws
        -> SubscriptionsResponse
    {
        let user = try target.caller.requireUser(for: "Subscriptions")
        let key = try target.key()
        let database = try await databaseForReading(key)
        let rows = try await storage.read(in: key) { tx in
            try request.subscriptionIDs.map { try tx.subscription(databaseID: database.id, userID: user.id, subscriptionID: $0) }
        }
        var results: [ItemResult<SubscriptionEntry>] = []
        for (id, row) in zip(request.subscriptionIDs, rows) {
            if let row {
                results.append(.success(.subscription(try Self.definition(row.definition))))
            } else {
                results.append(.failure(Self.subscriptionNotFound(id)))
            }
        }
        return SubscriptionsResponse(subscriptions: results)
    }

    /// `subscriptions/modify`: each operation stands alone. `create` refuses an ID in use,
    /// `update` replaces an existing subscription, `delete` removes one.
    public func modifySubscriptions(_ target: DatabaseTarget, _ request: SubscriptionsModifyRequest) async throws
        -> SubscriptionsResponse
    {
        let user = try target.caller.requireUser(for: "Subscriptions")
        let key = try target.key()
        let now = self.now
        let access = try await publicAccess(target)
        let (results, changes, versions) = try await storage.write(in: key) { tx in
            let before = try tx.subscriptionsVersion()
            let database = try tx.ensureDatabase(key)
            var seen = Set<String>()
            var changes: [(Subscription.Key, Subscription?)] = []
            // The caller's subscriptions to this database, read once and kept current by the
            // operations as they succeed: read again for each operation, a batch of 200 near the
            // limit of 1,000 read 200,000 rows (nine seconds on SQLite, sixteen on PostgreSQL).
            var mine = try Dictionary(
                tx.subscriptions(databaseID: database.id, userID: user.id).map { ($0.subscriptionID, $0) }, uniquingKeysWith: { $1 })
            let results: [ItemResult<SubscriptionEntry>] = try request.operations.map { operation in
                do {
                    guard seen.insert(operation.subscriptionID).inserted else {
                        throw CloudKitError.badRequest(
                            "subscription '\(operation.subscriptionID)' appears more than once in this request; send one operation per subscription")
                    }
                    let id = Subscription.Key(userID: user.id, subscriptionID: operation.subscriptionID)
                    return .success(
                        try tx.savepoint {
                            let existing = mine[operation.subscriptionID]
                            guard let input = operation.subscription else {
                                guard existing != nil,
                                    try tx.deleteSubscription(
                                        databaseID: database.id, userID: user.id, subscriptionID: operation.subscriptionID)
                                else { throw Self.subscriptionNotFound(operation.subscriptionID) }
                                mine[operation.subscriptionID] = nil
                                changes.append((id, nil))
                                return .deleted(subscriptionID: operation.subscriptionID)
                            }
                            if operation.type == .create, existing != nil {
                                throw CloudKitError(
                                    .exists, "subscription '\(operation.subscriptionID)' already exists; use update to change it")
                            }
                            if operation.type == .update, existing == nil { throw Self.subscriptionNotFound(operation.subscriptionID) }
                            // The caller's other subscriptions to this database.
                            let otherCount = mine.count - (existing == nil ? 0 : 1)
                            if existing == nil, otherCount >= Limits.subscriptionsPerDatabase.value {
                                throw CloudKitError.limitExceeded(
                                    Limits.subscriptionsPerDatabase, actual: otherCount + 1,
                                    what: "the number of your subscriptions to this database")
                            }
                            if target.scope == .public {
                                try Self.checkPublicFanOut(input, others: mine.values.filter { $0.subscriptionID != operation.subscriptionID })
                            }
                            try self.checkScope(input, target: target, database: database, tx: tx)
                            // A subscription to records the caller may not read at all would
                            // never fire (docs/roles.md): refused, saying why.
                            if let access, let recordType = input.recordType, case .denied = access.queryReach(recordType) {
                                throw access.refusal(.read, recordType)
                            }
                            let row = SubscriptionRow(
                                databaseID: database.id, database: key, userID: user.id, subscriptionID: input.subscriptionID,
                                definition: input.json.serialized(), createdAt: existing?.createdAt ?? now)
                            let compiled = try self.compile(row, input: input, tx: tx)
                            try tx.putSubscription(row)
                            mine[row.subscriptionID] = row
                            changes.append((id, compiled))
                            return .subscription(compiled.definition)
                        })
                } catch let error as CloudKitError {
                    var error = error
                    if error.subscriptionID == nil { error.subscriptionID = operation.subscriptionID }
                    return .failure(error)
                }
            }
            return (results, changes.map { (database.id, $0.0, $0.1) }, (before, try tx.subscriptionsVersion(), database: database.id))
        }
        applyOwnSubscriptionChanges(changes, partition: PartitionIDs.partition(of: versions.database), before: versions.0, after: versions.1)
        return SubscriptionsResponse(subscriptions: results)
    }

    /// The public database's bounds on what one user's subscriptions make every writer pay:
    /// `publicSubscriptionsPerUser` in all, `publicSubscriptionsPerRecordType` to one type.
    private static func checkPublicFanOut(_ input: SubscriptionInput, others: [SubscriptionRow]) throws {
        let total = Limits.publicSubscriptionsPerUser
        guard others.count < total.value else {
            throw CloudKitError.limitExceeded(
                total, actual: others.count + 1,
                what: "the number of your subscriptions to the public database (each is matched against every user's writes)")
        }
        guard let recordType = input.recordType else { return }
        let sameType = try others.filter { try definition($0.definition).recordType == recordType }.count
        let perType = Limits.publicSubscriptionsPerRecordType
        guard sameType < perType.value else {
            throw CloudKitError.limitExceeded(
                perType, actual: sameType + 1,
                what: "the number of your public subscriptions to record type '\(recordType)' (combine their filters, or subscribe to fewer)")
        }
    }

    // MARK: Definitions

    static func subscriptionNotFound(_ id: String) -> CloudKitError {
        var error = CloudKitError(.notFound, "subscription '\(Names.escaped(id))' does not exist")
        error.subscriptionID = id
        return error
    }

    /// What a database allows: query subscriptions everywhere but the shared database, zone
    /// subscriptions on existing custom zones of the private database, database subscriptions
    /// in the private and shared databases (as CloudKit).
    private func checkScope(_ input: SubscriptionInput, target: DatabaseTarget, database: DatabaseRow, tx: ReadUnit) throws {
        switch (input.type, target.scope) {
        case (.zone, .public):
            throw CloudKitError.badRequest("zone subscriptions are not supported in the public database; use a query subscription")
        case (.database, .public):
            throw CloudKitError.badRequest("database subscriptions are not supported in the public database; use a query subscription")
        case (.query, .shared), (.zone, .shared):
            throw CloudKitError.badRequest("the shared database supports database subscriptions only")
        default: break
        }
        if input.type == .zone, input.zoneID?.zoneName == Names.defaultZone {
            throw CloudKitError.badRequest("zone subscriptions watch custom zones; _defaultZone has no change feed to follow")
        }
        if let zoneID = input.zoneID, input.type == .zone || !input.zoneWide {
            _ = try resolveZone(zoneID, in: database, target: target, tx: tx)
        }
    }

    /// A subscription ready for matching. Query filters are checked as `records/query` checks
    /// them (types, and in production the indexes), against the schema of the environment:
    /// a subscription to a record type the schema does not have is refused.
    func compile(_ row: SubscriptionRow, input: SubscriptionInput, tx: ReadUnit) throws -> Subscription {
        var conditions: [IndexCondition] = []
        if let recordType = input.recordType {
            let key = row.database
            guard try tx.schemaRecordTypes(container: key.container, environment: key.environment).contains(recordType) else {
                throw CloudKitError.badRequest(
                    "\(input.type == .query ? "query.recordType" : WireKey.recordType): record type '\(recordType)' does not exist in the \(key.environment.rawValue) schema; save a record of it first (development) or deploy the schema (production)")
            }
            if input.type == .query {
                let schema = try schemaMap(recordType: recordType, key: key, tx: tx)
                conditions = try input.filters.map { try condition($0, schema: schema, locked: key.environment == .production) }
            }
        }
        return Subscription(
            key: Subscription.Key(userID: row.userID, subscriptionID: row.subscriptionID), databaseID: row.databaseID,
            database: row.database, type: input.type, recordType: input.recordType,
            zoneName: input.type == .database || input.zoneWide ? nil : input.zoneID?.zoneName ?? Names.defaultZone,
            conditions: conditions, firesOn: input.firesOn, firesOnce: input.firesOnce,
            notificationInfo: input.notificationInfo, definition: input)
    }

    /// Every stored subscription of every partition, compiled, as the service starts. One that
    /// no longer compiles (a field it filters on changed type) is left out, so it stops firing
    /// rather than stopping the server; the log says which and why, so its owner can save it
    /// again. A partition that does not answer is indexed by the pipeline's next drain.
    func loadSubscriptions() async throws {
        try await storage.read { tx in try self.refreshSubscriptionIndex(tx, partition: 0) }
        for partition in storage.otherPartitions {
            do {
                try await partition.store.read { tx in try self.refreshSubscriptionIndex(tx, partition: partition.number) }
            } catch {
                logger.error(
                    "a partition's subscriptions could not be read; the notification pipeline tries again",
                    metadata: ["partition": "\(partition.name)", "error": "\(error)"])
            }
        }
    }

    /// Every subscription `tx`'s store holds, compiled.
    func compiledSubscriptions(_ tx: ReadUnit) throws -> [Subscription] {
        try tx.allSubscriptions().compactMap { row in try compileStored(row, tx: tx) }
    }

    /// A stored subscription, compiled; nil (and a warning in the log) when it no longer
    /// compiles, for instance after its record type left the schema. Only the subscription's
    /// own faults make it nil: a storage error, or a unit of work's request to load more
    /// (`ReadUnit.Miss`), goes on to the caller, or a run missing rows would build an index
    /// without the subscription and mark it current.
    private func compileStored(_ row: SubscriptionRow, tx: ReadUnit) throws -> Subscription? {
        func dropped(_ error: any Error) -> Subscription? {
            logger.warning(
                "a stored subscription no longer compiles and will not fire until it is saved again",
                metadata: [
                    WireKey.subscriptionID: "\(row.subscriptionID)", "databaseID": "\(row.databaseID)",
                    "userID": "\(row.userID)", "error": "\(error)",
                ])
            return nil
        }
        let input: SubscriptionInput
        do {
            input = try Self.definition(row.definition)
        } catch {
            return dropped(error)  // stored bytes that no longer read: nothing storage could mend
        }
        do {
            return try compile(row, input: input, tx: tx)
        } catch let error as CloudKitError {
            return dropped(error)
        }
    }

    /// At most this many changes are applied one by one; more, and the index is built again.
    static let subscriptionCatchUpLimit = 1_000

    /// Brings the index's part for `partition` (the partition whose store `tx` reads) up to
    /// date when subscriptions changed there since it was built (another node saved or
    /// deleted some), in the transaction that is about to rely on it: the changed
    /// subscriptions are read and compiled one by one, or, when there are many or storage no
    /// longer keeps them, the partition's part is built again. Returns the version `tx` sees.
    @discardableResult
    func refreshSubscriptionIndex(_ tx: ReadUnit, partition: Int64) throws -> Int64 {
        let version = try tx.subscriptionsVersion()
        let indexed = notificationHub.index.withLock { $0.version(ofPartition: partition) }
        guard indexed != version else { return version }
        if indexed >= 0, let changes = try tx.subscriptionChanges(after: indexed, limit: Self.subscriptionCatchUpLimit),
            changes.count < Self.subscriptionCatchUpLimit, changes.last?.version == version
        {
            // Each changed subscription once, as it is now (a later change supersedes an earlier).
            var updates: [SubscriptionIndex.Update] = []
            var seen: [Int64: Set<Subscription.Key>] = [:]  // by database
            for change in changes.reversed() {
                let key = Subscription.Key(userID: change.userID, subscriptionID: change.subscriptionID)
                guard seen[change.databaseID, default: []].insert(key).inserted else { continue }
                let row = try tx.subscription(databaseID: change.databaseID, userID: change.userID, subscriptionID: change.subscriptionID)
                updates.append((change.databaseID, key, try row.flatMap { try compileStored($0, tx: tx) }))
            }
            notificationHub.index.withLock { index in
                // Moved meanwhile (this process's own change): the next check catches up.
                guard index.version(ofPartition: partition) == indexed else { return }
                index.apply(updates, fromPartition: partition)
                index.setVersion(version, ofPartition: partition)
            }
            return version
        }
        let subscriptions = try compiledSubscriptions(tx)
        notificationHub.index.withLock { index in
            // Only forward: a transaction that read an older snapshot (another node's, or a
            // unit of work's load) must not put back subscriptions this process has since
            // deleted.
            if version > index.version(ofPartition: partition) {
                index.replacePartition(partition, with: subscriptions, version: version)
            }
        }
        return version
    }

    /// This process's own subscription changes in one partition, applied to the index after
    /// they commit. `before` and `after` are the partition's versions around them, in their
    /// transaction: if the index was at `before`, nothing else changed in between and it is
    /// now at `after`.
    func applyOwnSubscriptionChanges(_ changes: [SubscriptionIndex.Update], partition: Int64, before: Int64, after: Int64) {
        notificationHub.index.withLock { index in
            index.apply(changes, fromPartition: partition)
            if index.version(ofPartition: partition) == before { index.setVersion(after, ofPartition: partition) }
        }
    }

    /// A stored definition, read by the same code that reads a request's.
    static func definition(_ bytes: [UInt8]) throws -> SubscriptionInput {
        try SubscriptionInput(json: ObjectReader(root: try JSON.parse(bytes)))
    }
}
