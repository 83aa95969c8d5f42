import NimbusWire
import Testing

/// Every response body the server writes is the type NimbusKit reads: encoding, sending as
/// text and decoding gives back the same body, including the server's fast path (a record's
/// stored fields spliced in as text) and per-item error entries.
@Suite struct ResponseRoundTripTests {
    /// Encodes, serializes, parses and decodes, and checks nothing was lost or changed.
    @discardableResult
    func roundTrip<Body: WireBody>(_ body: Body) throws -> Body {
        let text = body.json.serialized()
        let decoded = try Body(body: try JSON.parse(text))
        #expect(withoutUUIDs(decoded.json) == withoutUUIDs(body.json), "\(String(decoding: text, as: UTF8.self))")
        return decoded
    }

    /// Each error entry gets a fresh `uuid` when written; the rest must survive the trip.
    func withoutUUIDs(_ json: JSON) -> JSON {
        switch json.parsed {
        case .object(let object):
            return .object(JSONObject(object.pairs.filter { $0.key != "uuid" }.map { ($0.key, withoutUUIDs($0.value)) }))
        case .array(let elements): return .array(elements.map(withoutUUIDs))
        case let other: return other
        }
    }

    let zone = WireZoneID(zoneName: "Notes", ownerRecordName: "_abc")
    let stamp = RecordStamp(timestamp: 1_700_000_000_123, userRecordName: "_abc", deviceID: "phone")

    func record(_ name: String, fields: RecordFields) -> RecordOutput {
        RecordOutput(
            recordName: name, recordType: "Note", recordChangeTag: "3f", fields: fields, created: stamp, modified: stamp,
            parent: "folder", zoneID: zone)
    }

    @Test func recordsWithStoredAndTypedFieldsDeletionsAndErrors() throws {
        let values: [(name: String, value: FieldValue)] = [
            ("title", .string("Hello")), ("stars", .int64(5)), ("tags", .list(.string, [.string("a"), .string("b")])),
        ]
        let typed = RecordFields(values)
        // The server's fast path: the stored text of the fields, written as it is.
        let stored = RecordFields.stored(SerializedJSON(trusted: typed.json.serialized()))
        var conflict = CloudKitError(.conflict, "changed", recordName: "n4", serverRecord: record("n4", fields: typed).json)
        conflict.retryAfter = 3
        let response = RecordsResponse(
            records: [
                .success(.record(record("n1", fields: stored))), .success(.record(record("n2", fields: typed))),
                .success(.deleted(DeletedRecord(recordName: "n3", recordType: "Note", zoneID: zone))), .failure(conflict),
            ],
            continuationMarker: "next")
        let decoded = try roundTrip(response)
        #expect(decoded.continuationMarker == "next")
        guard case .success(.record(let first)) = decoded.records[0], case .success(.record(let second)) = decoded.records[1],
            case .success(.deleted(let deleted)) = decoded.records[2], case .failure(let error) = decoded.records[3]
        else {
            Issue.record("entries came back as the wrong cases: \(decoded.records)")
            return
        }
        #expect(try first.fields.values().map(\.value) == values.map(\.value))
        #expect(try second.fields.values().map(\.name) == ["title", "stars", "tags"])
        #expect(first.parent == "folder" && first.created == stamp && first.zoneID == zone && first.recordChangeTag == "3f")
        #expect(deleted == DeletedRecord(recordName: "n3", recordType: "Note", zoneID: zone))
        #expect(error.code == .conflict && error.recordName == "n4" && error.retryAfter == 3)
        let server = try RecordOutput(body: try #require(error.serverRecord))
        #expect(try server.fields.values().map(\.name) == ["title", "stars", "tags"])
    }

    @Test func aFieldThatDoesNotReadIsRefusedNamingIt() throws {
        let fields = RecordFields(["when": ["value": "yesterday", "type": "TIMESTAMP"]])
        #expect(throws: CloudKitError.self) { try fields.values() }
        do {
            _ = try fields.values()
        } catch {
            #expect(error.reason.contains("fields.when"))
        }
        let untyped = RecordFields(["x": ["value": 1]])
        #expect(throws: CloudKitError.self) { try untyped.values() }
    }

    @Test func changeFeeds() throws {
        let changes = ZoneRecordChanges(
            zoneID: zone, syncToken: "T1",
            records: [.record(record("a", fields: RecordFields([("n", .int64(1))]))), .deleted(DeletedRecord(recordName: "b", recordType: nil, zoneID: zone))],
            moreComing: true)
        let zones = try roundTrip(
            ZoneChangesResponse(zones: [.success(changes), .failure(CloudKitError(.zoneNotFound, "gone", zoneID: zone.json))]))
        guard case .success(let first) = zones.zones[0], case .failure(let missing) = zones.zones[1] else {
            Issue.record("wrong cases: \(zones.zones)")
            return
        }
        #expect(first.syncToken == "T1" && first.moreComing && first.records.count == 2)
        #expect(missing.code == .zoneNotFound)
        let legacy = try roundTrip(RecordChangesResponse(changes))
        #expect(legacy.syncToken == "T1" && legacy.records.count == 2)
        let database = try roundTrip(
            DatabaseChangesResponse(
                zones: [.zone(ZoneOutput(zoneID: zone, syncToken: "Z", atomic: true)), .deleted(WireZoneID(zoneName: "Old"))],
                syncToken: "D", moreComing: false))
        #expect(database.zones.map(\.zoneID.zoneName) == ["Notes", "Old"])
    }

    @Test func zonesAndSubscriptions() throws {
        let zones = try roundTrip(
            ZonesResponse(zones: [.success(.zone(ZoneOutput(zoneID: zone, syncToken: "Z", atomic: true))), .success(.deleted(zone))]))
        #expect(zones.zones.count == 2)
        let query = SubscriptionInput(
            subscriptionID: "s1", type: .query, recordType: "Note",
            queryJSON: ["recordType": "Note", "filterBy": []], zoneID: zone, zoneWide: false, firesOn: [.create, .delete],
            firesOnce: true, notificationInfo: ["alertBody": "new note"])
        let subscriptions = try roundTrip(
            SubscriptionsResponse(subscriptions: [
                .success(.subscription(query)), .success(.deleted(subscriptionID: "s2")),
                .failure(CloudKitError(.notFound, "no s3")),
            ]))
        guard case .success(.subscription(let decoded)) = subscriptions.subscriptions[0] else {
            Issue.record("not a subscription: \(subscriptions.subscriptions[0])")
            return
        }
        #expect(decoded.firesOn == [.create, .delete] && decoded.firesOnce && decoded.zoneID == zone && !decoded.zoneWide)
    }

    @Test func deviceSignInUsersAndStreamFrames() throws {
        let payload = PushPayload(
            ck: PushPayload.CloudKitPart(
                notificationID: "N", container: "iCloud.x", userRecordName: "_abc", environment: 2,
                event: .database(subscriptionID: "s", database: .private)))
        let changes = try roundTrip(
            NotificationChangesResponse(
                notifications: [NotificationEntry(notificationID: "N", read: true, payload: payload.json)], syncToken: "T",
                moreComing: false))
        #expect(changes.notifications.first?.read == true)
        #expect(try roundTrip(MarkNotificationsReadResponse(notificationIDs: ["N"])).notificationIDs == ["N"])
        #expect(try roundTrip(BadgeModifyResponse(badgeValue: 4)).badgeValue == 4)
        #expect(try roundTrip(PushTokenResponse(apnsEnvironment: "production", apnsToken: "t", webcourierURL: "http://h/w")).webcourierURL == "http://h/w")
        #expect(try roundTrip(SignInResponse(ckWebAuthToken: "w", userRecordName: "_abc")).ckWebAuthToken == "w")
        let identity = UserIdentity(
            userRecordName: "_abc", lookupInfo: UserLookupInfo(emailAddress: "ann@example.com", phoneNumber: "+15550100", userRecordName: "_abc"),
            nameComponents: NameComponents(namePrefix: "Dr", givenName: "Ann", middleName: "B", familyName: "Lee", nameSuffix: "Jr", nickname: "annie"))
        #expect(try roundTrip(CallerIdentityResponse(identity: identity)).identity == identity)
        // An identity of someone not discoverable: only the lookup info asked about.
        let unknown = UserIdentity(lookupInfo: UserLookupInfo(phoneNumber: "+15550199"))
        #expect(try roundTrip(UserIdentitiesResponse(users: [identity, unknown])).users == [identity, unknown])
        let legacy = LegacyUser(userRecordName: "_abc", firstName: "Ann", lastName: "Lee", emailAddress: "ann@example.com")
        #expect(try roundTrip(LegacyUsersResponse(users: [legacy, LegacyUser(userRecordName: "_d")])).users == [legacy, LegacyUser(userRecordName: "_d")])
        for status in [DiscoverabilityStatus.initialState, .granted, .denied] {
            #expect(try roundTrip(DiscoverabilityResponse(status: status)).status == status)
        }
        #expect(NameComponents(storedText: identity.nameComponents!.storedText) == identity.nameComponents)
        #expect(NameComponents(storedText: "not json").isEmpty)
        for frame: NotificationStreamFrame in [
            .ready(syncToken: "T"), .badge(3), .notification(notificationID: "N", payload: payload.json, syncToken: "T2"),
        ] {
            #expect(try roundTrip(frame) == frame)
        }
        #expect(throws: CloudKitError.self) { try NotificationStreamFrame(body: ["type": "gossip"]) }
    }

    @Test func pushPayloadsOfEveryEvent() throws {
        var aps = PushPayload.Aps()
        aps.alert.body = "hi"
        aps.alert.localizationArgs = ["a"]
        aps.alert.titleLocalizationKey = "T"
        aps.badge = 2
        aps.sound = "ding"
        aps.contentAvailable = true
        let events: [PushPayload.Event] = [
            .query(
                subscriptionID: "s", recordName: "r", reason: 1, zoneName: "Notes", zoneOwner: "_abc", database: .public,
                fields: ["title": "x"]),
            .zone(subscriptionID: "s", zoneName: "Notes", zoneOwner: "_abc", database: .shared),
            .database(subscriptionID: "s", database: .private), .read(notificationIDs: ["a", "b"]),
        ]
        for event in events {
            let payload = PushPayload(
                aps: aps, ck: PushPayload.CloudKitPart(notificationID: "N", container: "c", userRecordName: "_abc", environment: 1, event: event))
            #expect(try roundTrip(payload) == payload)
        }
        // Apple's payloads may carry the alert as a bare string.
        let bare = try PushPayload(body: ["aps": ["alert": "plain"], "ck": ["nid": "N", "met": ["sid": "s", "dbs": 2]]])
        #expect(bare.aps.alert.body == "plain")
        #expect(throws: CloudKitError.self) { try PushPayload(body: ["aps": ["alert": "no ck"]]) }
        #expect(throws: CloudKitError.self) { try PushPayload(body: ["ck": ["nid": "N"]]) }
    }

    /// The admin API's bodies the server writes and the command line reads (`ConsoleKey`).
    @Test func adminBodiesTheCommandLineReads() throws {
        let account = OperatorAccount(
            name: "olga", role: "administrator", createdAt: 1_700_000_000_000, secondFactor: true, disabled: false,
            containers: ["iCloud.a"], oneTimePasswordExpiresAt: 1_700_000_600_000)
        #expect(try roundTrip(OperatorSession(account: account, csrfToken: "c")).account == account)
        #expect(try roundTrip(OperatorSignIn(name: "olga", password: "p", code: "123456")).code == "123456")
        #expect(try roundTrip(OperatorSignIn(name: "olga", password: "p")).code == nil)
        #expect(try roundTrip(SchemaCheckAnswer(missing: ["type Note", "field Note.text"])).missing.count == 2)
        #expect(try roundTrip(SchemaCheckAnswer(missing: [])).missing.isEmpty)
        let report = DeviceSyncReport(
            user: "alice", container: "iCloud.a", environment: "development", retentionDays: 30, behindLimit: 1000,
            devices: [
                .init(
                    deviceID: "phone", lastSeen: 5, database: .init(fetchedAt: 4, status: .behind),
                    zones: [
                        .init(zone: "Notes", fetchedAt: 3, status: .behind, behind: 2),
                        .init(zone: "Old", fetchedAt: 2, status: .expired, reason: "made again"),
                    ],
                    zonesNeverFetched: ["Photos"], push: .init(missed: 1, lastSentAt: 2, oldestMissedAt: 3)),
                .init(deviceID: "laptop", lastSeen: 1, database: nil, zones: [], zonesNeverFetched: [], push: .init(missed: 0, lastSentAt: nil, oldestMissedAt: nil)),
            ])
        #expect(try roundTrip(report) == report)
        // A status this version does not know is refused naming where it is.
        var device = try #require(report.devices.first?.json.objectValue)
        device["zones"] = [["zone": "Notes", "fetchedAt": 1, "status": "sideways"]]
        #expect(throws: CloudKitError.self) { try DeviceSyncReport.Device(body: .object(device)) }
        do {
            _ = try DeviceSyncReport.Device(body: .object(device))
        } catch {
            #expect(error.reason.contains("zones[0].status") && error.reason.contains("sideways"), "\(error.reason)")
        }
    }

    @Test func errorsWithCodesThisVersionDoesNotKnowKeepTheirName() throws {
        let response = try RecordsResponse(body: ["records": [["serverErrorCode": "SHARE_LIMIT", "reason": "too many"]]])
        guard case .failure(let error) = response.records.first else {
            Issue.record("not a failure: \(response.records)")
            return
        }
        #expect(error.code.rawValue == "SHARE_LIMIT" && !error.code.isRecognized)
    }

    @Test func aBodyOfTheWrongShapeIsRefusedNamingTheKey() throws {
        do {
            _ = try RecordsResponse(body: ["records": [["recordName": 5, "recordType": "Note"]]])
            Issue.record("a number for recordName was read")
        } catch {
            #expect(error.reason.contains("records[0].recordName"))
        }
        #expect(throws: CloudKitError.self) { try ZoneChangesResponse(body: ["zones": "none"]) }
        #expect(throws: CloudKitError.self) { try SignInResponse(body: ["ckWebAuthToken": "w"]) }
    }
}
