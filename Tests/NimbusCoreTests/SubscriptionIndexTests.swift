@testable import NimbusCore
import NimbusStorage
import NimbusWire
import Testing

/// The subscription index as a transcript: subscriptions filed, changes matched, removals.
@Suite struct SubscriptionIndexTests {
    static let database = DatabaseRow(
        id: 7, key: DatabaseKey(container: "c", environment: .development, scope: .public, ownerID: 0), sequence: 0)

    static func subscription(
        _ id: String, user: Int64 = 1, type: SubscriptionType = .query, recordType: String? = "Post", zone: String? = nil,
        conditions: [IndexCondition] = [], firesOn: FiresOn = .all
    ) -> Subscription {
        Subscription(
            key: Subscription.Key(userID: user, subscriptionID: id), databaseID: database.id, database: database.key,
            type: type, recordType: type == .query ? recordType : nil, zoneName: zone, conditions: conditions,
            firesOn: firesOn, firesOnce: false, notificationInfo: [:], definition: SubscriptionInput(subscriptionID: id, type: type))
    }

    static func row(_ name: String, topic: String, stars: Int64) -> RecordRow {
        let stamp = ChangeStamp(timestamp: 0, userRecordName: "_u", deviceID: "d")
        return RecordRow(
            zoneID: 1, recordName: name, recordType: "Post",
            fields: RecordCodec.encode([("topic", .string(topic)), ("stars", .int64(stars))]), parent: nil,
            changeSequence: 1, created: stamp, modified: stamp, isDeleted: false)
    }

    static func change(before: RecordRow?, after: RecordRow?) -> CommittedChanges {
        CommittedChanges(
            database: database, deviceID: "d", records: [RecordChange(zoneName: "_defaultZone", before: before, after: after)],
            zones: [])
    }

    static func topicIs(_ topic: String) -> IndexCondition { .compare(field: "topic", scope: .scalar, .equal, .text(topic)) }

    @Test func tenThousandEqualitySubscriptionsFireOnlyForTheirOwnValue() {
        var index = SubscriptionIndex()
        for number in 0..<10_000 { index.insert(Self.subscription("s\(number)", conditions: [Self.topicIs("topic-\(number)")])) }
        #expect(index.count == 10_000)
        let matches = index.matches(Self.change(before: nil, after: Self.row("r", topic: "topic-4242", stars: 1)))
        #expect(matches.map(\.subscription.key.subscriptionID) == ["s4242"])
        #expect(matches.first?.reason == .recordCreated)
        // Moving a record from one value to another: it leaves one result set, enters another.
        let moved = index.matches(
            Self.change(before: Self.row("r", topic: "topic-1", stars: 1), after: Self.row("r", topic: "topic-2", stars: 1)))
        #expect(Set(moved.map { "\($0.subscription.key.subscriptionID):\($0.reason!.rawValue)" }) == ["s1:3", "s2:1"])
        let removed = index.remove(databaseID: Self.database.id, key: Subscription.Key(userID: 1, subscriptionID: "s4242"))
        #expect(removed)
        #expect(index.matches(Self.change(before: nil, after: Self.row("r", topic: "topic-4242", stars: 1))).isEmpty)
        #expect(index.count == 9_999)
        let removedTwice = index.remove(databaseID: Self.database.id, key: Subscription.Key(userID: 1, subscriptionID: "s4242"))
        #expect(!removedTwice)
    }

    @Test func firesOnSelectsEnterChangeAndLeave() {
        var index = SubscriptionIndex()
        let good = IndexCondition.compare(field: "stars", scope: .scalar, .greaterOrEqual, .number(4))
        index.insert(Self.subscription("updates", conditions: [good], firesOn: .update))
        index.insert(Self.subscription("all", conditions: [good]))
        func fired(_ before: Int64?, _ after: Int64?) -> [String] {
            let changes = Self.change(
                before: before.map { Self.row("r", topic: "t", stars: $0) }, after: after.map { Self.row("r", topic: "t", stars: $0) })
            return index.matches(changes).map { "\($0.subscription.key.subscriptionID):\($0.reason!.rawValue)" }.sorted()
        }
        #expect(fired(nil, 1) == [])
        #expect(fired(nil, 5) == ["all:1"])
        #expect(fired(5, 4) == ["all:2", "updates:2"])
        #expect(fired(5, 1) == ["all:3"])
        #expect(fired(5, nil) == ["all:3"])
        #expect(fired(1, 2) == [])
    }

    @Test func zoneAndDatabaseSubscriptionsFireOncePerRequest() {
        var index = SubscriptionIndex()
        index.insert(Self.subscription("db", type: .database))
        index.insert(Self.subscription("zone", type: .zone, zone: "_defaultZone"))
        index.insert(Self.subscription("other-zone", type: .zone, zone: "Other"))
        var changes = Self.change(before: nil, after: Self.row("a", topic: "t", stars: 1))
        changes.records.append(RecordChange(zoneName: "_defaultZone", before: nil, after: Self.row("b", topic: "t", stars: 1)))
        #expect(index.matches(changes).map(\.subscription.key.subscriptionID).sorted() == ["db", "zone"])
        #expect(!index.watches(databaseID: 8))
    }

    /// Conditions read a record's typed fields, as a query would read its index.
    @Test func inMemoryConditionsAgreeWithTheQuerySemantics() throws {
        let stamp = ChangeStamp(timestamp: 1_700_000_000_000, userRecordName: "_maker", deviceID: "d")
        let fields: RecordCodec.Fields = [
            ("title", .string("Crème brûlée")), ("tags", .list(.string, [.string("a"), .string("b")])), ("n", .double(3)),
            ("where", .location(Location(latitude: 37.33, longitude: -122.03))), ("note", .string("tart")),
            ("___share", .string("the server's own")),
        ]
        let record = QueriedRecord(
            RecordRow(
                zoneID: 1, recordName: "r", recordType: "Post", fields: RecordCodec.encode(fields), parent: nil, changeSequence: 1,
                created: stamp, modified: stamp, isDeleted: false), fields: fields)
        func check(_ condition: IndexCondition) -> Bool { condition.matches(record) }
        #expect(check(.compare(field: "n", scope: .scalar, .less, .number(4))))
        #expect(!check(.compare(field: "n", scope: .scalar, .less, .text("4"))))  // kinds never compare
        #expect(!check(.compare(field: "tags", scope: .scalar, .equal, .text("a"))))  // a list is not a scalar
        #expect(check(.compare(field: "tags", scope: .element, .equal, .text("a"))))
        #expect(check(.allOf(field: "tags", [.text("a"), .text("b")])))
        #expect(!check(.allOf(field: "tags", [.text("a"), .text("c")])))
        #expect(check(.oneOf(field: "n", scope: .scalar, [.number(1), .number(3)])))
        #expect(check(.beginsWith(field: "title", scope: .scalar, prefix: "Crè")))
        #expect(check(.tokens(field: nil, ["creme", "brulee"], all: true)))
        #expect(check(.tokens(field: nil, ["creme", "tart"], all: true)))  // any text field
        #expect(!check(.tokens(field: "title", ["creme", "tart"], all: true)))
        #expect(check(.tokens(field: "title", ["creme", "tart"], all: false)))
        #expect(check(.tokens(field: "tags", ["b"], all: true)))  // a list's strings
        #expect(!check(.tokens(field: nil, ["server"], all: false)))  // reserved fields are not the app's
        #expect(!check(.compare(field: "___share", scope: .scalar, .equal, .text("the server's own"))))
        // System fields read from the row.
        #expect(check(.compare(field: SystemField.recordID.rawValue, scope: .scalar, .equal, .text("r"))))
        #expect(check(.compare(field: SystemField.createdBy.rawValue, scope: .scalar, .equal, .text("_maker"))))
        #expect(check(.compare(field: SystemField.modTime.rawValue, scope: .scalar, .greater, .integer(1_600_000_000_000))))
        #expect(!check(.compare(field: SystemField.recordID.rawValue, scope: .element, .equal, .text("r"))))
        // A location is not a number to compare, only a place to be near.
        #expect(!check(.compare(field: "where", scope: .scalar, .equal, .number(37.33))))
        #expect(check(.near(field: "where", latitude: 37.3349, longitude: -122.0090, meters: 5_000)))
        #expect(!check(.near(field: "where", latitude: 40.7, longitude: -74.0, meters: 5_000)))
        #expect(check(.not(.compare(field: "missing", scope: .scalar, .equal, .number(1)))))  // NOT_EQUALS matches absence
    }

    @Test func integersPast2To53MatchOnlyTheirExactValue() {
        let twoTo53: Int64 = 9_007_199_254_740_992
        var index = SubscriptionIndex()
        index.insert(Self.subscription("exact", conditions: [.compare(field: "stars", scope: .scalar, .equal, .integer(twoTo53 + 1))]))
        index.insert(Self.subscription("above", conditions: [.compare(field: "stars", scope: .scalar, .greater, .integer(twoTo53))]))
        func fired(_ stars: Int64) -> [String] {
            index.matches(Self.change(before: nil, after: Self.row("r", topic: "t", stars: stars)))
                .map(\.subscription.key.subscriptionID).sorted()
        }
        #expect(fired(twoTo53) == [])
        #expect(fired(twoTo53 + 1) == ["above", "exact"])
        #expect(fired(twoTo53 + 2) == ["above"])
    }

    @Test func integersAndDoublesCompareByExactValue() {
        let twoTo53: Int64 = 9_007_199_254_740_992
        #expect(IndexValue.integer(3) == .number(3.0))
        #expect(Set<IndexValue>([.integer(3), .number(3.0)]).count == 1)
        #expect(IndexValue.integer(twoTo53 + 1) != .number(Double(twoTo53 + 1)))  // the double is 2^53
        #expect(IndexValue.numericOrder(.integer(twoTo53 + 1), .number(9_007_199_254_740_992.0)) == 1)
        #expect(IndexValue.numericOrder(.integer(2), .number(2.5)) == -1)
        #expect(IndexValue.numericOrder(.integer(-2), .number(-2.5)) == 1)
        #expect(IndexValue.numericOrder(.integer(.max), .number(9_223_372_036_854_775_808.0)) == -1)
        #expect(IndexValue.numericOrder(.integer(.min), .number(-9_223_372_036_854_775_808.0)) == 0)
        #expect(IndexValue.numericOrder(.integer(0), .number(.nan)) == nil)
        #expect(IndexValue.integer(1) != .text("1"))
    }

    @Test func outboxEntriesReadBackAsTheChangesTheyRecord() throws {
        var deleted = Self.row("gone", topic: "t", stars: 2)
        deleted.isDeleted = true
        deleted.parent = "folder"
        var changes = Self.change(before: Self.row("r", topic: "a \"quoted\" topic", stars: .max), after: deleted)
        changes.records.append(RecordChange(zoneName: "Other", before: nil, after: Self.row("new", topic: "é", stars: -1)))
        changes.zones = [("Other", false), ("Old", true)]
        let read = try OutboxCodec.decode(OutboxCodec.encode(changes))
        #expect(read.database == changes.database)
        #expect(read.deviceID == changes.deviceID)
        #expect(read.records.map(\.zoneName) == ["_defaultZone", "Other"])
        #expect(read.records.map(\.before) == changes.records.map(\.before))
        #expect(read.records.map(\.after) == changes.records.map(\.after))
        #expect(read.zones.map(\.name) == ["Other", "Old"])
        #expect(read.zones.map(\.deleted) == [false, true])
        #expect(throws: (any Error).self) { try OutboxCodec.decode(Array("[2]".utf8)) }
        #expect(throws: (any Error).self) { try OutboxCodec.decode(Array("not json".utf8)) }
    }
}
