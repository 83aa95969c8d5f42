import NimbusWire
import Testing

/// Every request body NimbusKit writes is the type the server reads: encoding, sending as
/// text and decoding gives back the same body.
@Suite struct RequestRoundTripTests {
    /// Encodes, serializes, parses and decodes, and checks nothing was lost or changed.
    func roundTrip<Body>(_ body: Body, json: (Body) -> JSON, decode: (ObjectReader) throws -> Body) throws -> Body {
        let text = json(body).serialized()
        let decoded = try decode(try ObjectReader(root: try JSON.parse(text)))
        #expect(json(decoded) == json(body), "\(String(decoding: text, as: UTF8.self))")
        return decoded
    }

    let zone = WireZoneID(zoneName: "Notes", ownerRecordName: "_abc")

    @Test func recordsModify() throws {
        let fields: [(name: String, field: RawField)] = [
            ("title", FieldValue.string("Hello").rawField), ("stars", FieldValue.int64(5).rawField),
            ("tags", FieldValue.list(.string, [.string("a"), .string("b")]).rawField),
            ("gone", RawField(value: .null, declaredType: nil)),
        ]
        let request = RecordsModifyRequest(
            operations: [
                RecordOperationInput(
                    type: .update,
                    record: RecordInput(recordName: "n1", recordType: "Note", recordChangeTag: "2", fields: fields, parent: .some("p")),
                    desiredKeys: ["title"]),
                RecordOperationInput(type: .forceDelete, record: RecordInput(recordName: "n2")),
                RecordOperationInput(type: .create, record: RecordInput(recordName: "n3", recordType: "Note", parent: .some(nil))),
            ],
            zoneID: zone, atomic: true, desiredKeys: ["stars"], numbersAsStrings: true)
        let decoded = try roundTrip(request, json: \.json, decode: RecordsModifyRequest.init(json:))
        #expect(decoded.operations.map(\.type) == [.update, .forceDelete, .create])
        #expect(decoded.operations[0].record.fields?.map(\.name) == ["title", "stars", "tags", "gone"])
        #expect(decoded.operations[0].record.parent == .some("p"))
        #expect(decoded.operations[2].record.parent == .some(nil))
        #expect(decoded.zoneID == zone && decoded.atomic == true && decoded.numbersAsStrings)
    }

    @Test func recordsLookup() throws {
        let request = RecordsLookupRequest(
            records: [(recordName: "a", desiredKeys: ["x"]), (recordName: "b", desiredKeys: nil)], zoneID: zone,
            desiredKeys: ["y"])
        let decoded = try roundTrip(request, json: \.json, decode: RecordsLookupRequest.init(json:))
        #expect(decoded.records.map(\.recordName) == ["a", "b"])
    }

    @Test func zones() throws {
        let modify = ZonesModifyRequest(operations: [(type: .create, zoneID: zone), (type: .delete, zoneID: .defaultZone)])
        let decodedModify = try roundTrip(modify, json: \.json, decode: ZonesModifyRequest.init(json:))
        #expect(decodedModify.operations.map(\.type) == [.create, .delete])
        let lookup = ZonesLookupRequest(zones: [zone, .defaultZone])
        #expect(try roundTrip(lookup, json: \.json, decode: ZonesLookupRequest.init(json:)).zones == [zone, .defaultZone])
    }

    @Test func changeFeeds() throws {
        let database = DatabaseChangesRequest(syncToken: "T", resultsLimit: 50)
        let decodedDatabase = try roundTrip(database, json: \.json, decode: DatabaseChangesRequest.init(json:))
        #expect(decodedDatabase.syncToken == "T" && decodedDatabase.resultsLimit == 50)
        let zoneChanges = ZoneChangesRequest(zones: [
            .init(zoneID: zone, syncToken: "S", desiredKeys: ["k"], desiredRecordTypes: ["Note"], resultsLimit: 10),
            .init(zoneID: .defaultZone, syncToken: nil),
        ])
        let decoded = try roundTrip(zoneChanges, json: \.json, decode: ZoneChangesRequest.init(json:))
        #expect(decoded.zones.map(\.syncToken) == ["S", nil] && decoded.zones[0].resultsLimit == 10)
    }

    @Test func aBodyTheServerRefusesIsRefusedAfterTheTrip() throws {
        // The shared type does not launder bad input: an invalid zone name still fails to decode.
        let bad = ZonesLookupRequest(zones: [WireZoneID(zoneName: "")])
        #expect(throws: CloudKitError.self) { try ZonesLookupRequest(json: ObjectReader(root: bad.json)) }
    }

    @Test func recordsQuery() throws {
        let filters = [
            QueryFilterInput(comparator: .equals, fieldName: "category", field: FieldValue.string("c1").rawField),
            QueryFilterInput(comparator: .greaterThan, fieldName: SystemField.createTime.rawValue, field: FieldValue.timestamp(5).rawField),
            QueryFilterInput(comparator: .containsAllTokens, fieldName: nil, field: FieldValue.string("apple pie").rawField),
            QueryFilterInput(
                comparator: .near, fieldName: "place", field: FieldValue.location(Location(latitude: 1, longitude: 2)).rawField,
                distance: 500),
        ]
        let sorts = [
            QuerySortInput(fieldName: "count", ascending: false),
            QuerySortInput(fieldName: SystemField.modTime.rawValue),
            QuerySortInput(fieldName: "place", relativeLocation: Location(latitude: 1, longitude: 2)),
        ]
        let query = RecordsQueryRequest.queryJSON(recordType: "Item", filters: filters, sorts: sorts)
        let request = RecordsQueryRequest(
            queryJSON: query, zoneID: zone, resultsLimit: 20, continuationMarker: "M", desiredKeys: ["title"])
        let decoded = try roundTrip(request, json: \.json, decode: RecordsQueryRequest.init(json:))
        #expect(decoded.recordType == "Item" && decoded.resultsLimit == 20 && decoded.continuationMarker == "M")
        #expect(decoded.filters.map(\.comparator) == [.equals, .greaterThan, .containsAllTokens, .near])
        #expect(decoded.filters.map(\.fieldName) == ["category", "___createTime", nil, "place"])
        #expect(decoded.filters[3].distance == 500)
        #expect(decoded.sorts.map(\.fieldName) == ["count", "___modTime", "place"])
        #expect(decoded.sorts.map(\.ascending) == [false, true, true] && decoded.sorts[2].relativeLocation != nil)
        // What the server reads back is what was encoded: filters survive a second trip unchanged.
        let again = RecordsQueryRequest.queryJSON(recordType: decoded.recordType, filters: decoded.filters, sorts: decoded.sorts)
        #expect(again == query)
    }

    @Test func subscriptions() throws {
        let query = RecordsQueryRequest.queryJSON(
            recordType: "Item",
            filters: [QueryFilterInput(comparator: .equals, fieldName: "category", field: FieldValue.string("c1").rawField)],
            sorts: [])
        let modify = SubscriptionsModifyRequest(operations: [
            .init(
                type: .create,
                subscription: SubscriptionInput(
                    subscriptionID: "q", type: .query, recordType: "Item", queryJSON: query, zoneID: zone, firesOn: [.create, .delete],
                    firesOnce: true, notificationInfo: ["alertBody": "hi", "shouldBadge": true])),
            .init(type: .update, subscription: SubscriptionInput(subscriptionID: "z", type: .zone, recordType: "Note", zoneID: zone)),
            .init(type: .create, subscription: SubscriptionInput(subscriptionID: "d", type: .database)),
            .init(deleting: "old"),
        ])
        let decoded = try roundTrip(modify, json: \.json, decode: SubscriptionsModifyRequest.init(json:))
        #expect(decoded.operations.map(\.type) == [.create, .update, .create, .delete])
        #expect(decoded.operations.map(\.subscriptionID) == ["q", "z", "d", "old"])
        let queryInput = try #require(decoded.operations[0].subscription)
        #expect(queryInput.firesOn == [.create, .delete] && queryInput.firesOnce && queryInput.filters.count == 1)
        #expect(queryInput.notificationInfo["alertBody"] == "hi")
        #expect(decoded.operations[1].subscription?.recordType == "Note")
        let lookup = SubscriptionsLookupRequest(subscriptionIDs: ["a", "b"])
        #expect(try roundTrip(lookup, json: \.json, decode: SubscriptionsLookupRequest.init(json:)).subscriptionIDs == ["a", "b"])
    }

    @Test func deviceBodiesAndSignIn() throws {
        let changes = NotificationChangesRequest(syncToken: "T", resultsLimit: 7)
        #expect(try roundTrip(changes, json: \.json, decode: NotificationChangesRequest.init(json:)) == changes)
        let first = NotificationChangesRequest(syncToken: nil)
        #expect(try roundTrip(first, json: \.json, decode: NotificationChangesRequest.init(json:)) == first)
        let read = MarkNotificationsReadRequest(notificationIDs: ["a", "b"])
        #expect(try roundTrip(read, json: \.json, decode: MarkNotificationsReadRequest.init(json:)) == read)
        let badge = BadgeModifyRequest(badgeValue: 3)
        #expect(try roundTrip(badge, json: \.json, decode: BadgeModifyRequest.init(json:)) == badge)
        let signUp = SignUpRequest(
            username: "alice", password: "correct horse", emailAddress: "alice@example.com", phoneNumber: "+15550100",
            nameComponents: NameComponents(givenName: "Alice"))
        #expect(try roundTrip(signUp, json: \.json, decode: SignUpRequest.init(json:)) == signUp)
        let bare = SignUpRequest(username: "bob", password: "correct horse")
        #expect(try roundTrip(bare, json: \.json, decode: SignUpRequest.init(json:)) == bare)
        let signIn = SignInRequest(username: "alice", password: "correct horse")
        #expect(try roundTrip(signIn, json: \.json, decode: SignInRequest.init(json:)) == signIn)
        // The limits hold on the way in, whoever wrote the body.
        #expect(throws: CloudKitError.self) {
            try NotificationChangesRequest(json: ObjectReader(root: NotificationChangesRequest(syncToken: nil, resultsLimit: 201).json))
        }
        #expect(throws: CloudKitError.self) { try BadgeModifyRequest(json: ObjectReader(root: BadgeModifyRequest(badgeValue: -1).json)) }
    }

    @Test func userDiscoveryBodies() throws {
        let infos = [
            UserLookupInfo(emailAddress: "ann@example.com"), UserLookupInfo(phoneNumber: "+15550100"),
            UserLookupInfo(userRecordName: "_abc"),
        ]
        let discover = DiscoverUsersRequest(lookupInfos: infos)
        #expect(try roundTrip(discover, json: \.json, decode: DiscoverUsersRequest.init(json:)) == discover)
        let lookup = LegacyLookupRequest(users: infos)
        #expect(try roundTrip(lookup, json: \.json, decode: LegacyLookupRequest.init(json:)) == lookup)
        for discoverable in [true, false, nil] {
            let request = DiscoverabilityRequest(discoverable: discoverable)
            #expect(try roundTrip(request, json: \.json, decode: DiscoverabilityRequest.init(json:)) == request)
        }
        // At most 200 lookups a request: at the limit, and one past it.
        let full = Array(repeating: UserLookupInfo(emailAddress: "a@b.c"), count: Limits.operationsPerRequest.value)
        #expect(try DiscoverUsersRequest(json: ObjectReader(root: DiscoverUsersRequest(lookupInfos: full).json)).lookupInfos.count == 200)
        #expect(throws: CloudKitError.self) {
            try DiscoverUsersRequest(json: ObjectReader(root: DiscoverUsersRequest(lookupInfos: full + [infos[0]]).json))
        }
        #expect(throws: CloudKitError.self) { try LegacyLookupRequest(json: ObjectReader(root: LegacyLookupRequest(users: full + [infos[0]]).json)) }
    }
}
