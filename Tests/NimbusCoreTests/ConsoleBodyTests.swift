import NimbusWire
import Testing

/// The admin API's bodies (`Sources/NimbusWire/Console`) are one type for the server that
/// writes them and whoever reads them (the command line, the dashboard's names, tests): each
/// survives the trip through text with its optional parts present and absent, keeps the key
/// names the dashboard reads, and refuses bad input with the spot named.
@Suite struct ConsoleBodyTests {
    func roundTrip<Body: WireBody>(_ body: Body, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let text = body.json.serialized()
        let decoded = try Body(body: try JSON.parse(text))
        #expect(decoded.json == body.json, "\(String(decoding: text, as: UTF8.self))", sourceLocation: sourceLocation)
    }

    func keys(_ body: some WireBody) -> [String] {
        guard case .object(let object) = body.json.parsed else { return [] }
        return object.pairs.map(\.key).sorted()
    }

    let account = OperatorAccount(
        name: "ada", role: "developer", createdAt: 1, secondFactor: true, disabled: false, containers: ["iCloud.a"],
        oneTimePasswordExpiresAt: 9)

    @Test func operatorsSetupAndTheAuditLog() throws {
        try roundTrip(SetupState(open: true))
        try roundTrip(FirstOperatorSetup(token: "t", name: "ada", password: "p"))
        try roundTrip(OperatorSignedOut(signedOut: "ada"))
        try roundTrip(OperatorPasswordChange(currentPassword: "a", newPassword: "b"))
        try roundTrip(OperatorPasswordChanged())
        try roundTrip(SecondFactorEnrollment(secret: "S", uri: "otpauth://totp/x"))
        try roundTrip(SecondFactorCode(code: "123456"))
        try roundTrip(SecondFactorState(secondFactor: false))
        try roundTrip(OperatorList(operators: [account, OperatorAccount(json: ObjectReader(root: ["name": "b", "role": "viewer"]))]))
        try roundTrip(OperatorCreation(name: "b"))
        try roundTrip(OperatorCreation(name: "b", role: "viewer", containers: []))
        try roundTrip(OperatorChange())
        try roundTrip(OperatorChange(role: "viewer", containers: ["c"], everyContainer: false, disabled: true))
        try roundTrip(IssuedPassword(name: "b", password: "x"))
        try roundTrip(CreatedOperator(account: account, password: "x"))
        try roundTrip(Deleted(deleted: "b"))
        try roundTrip(
            AuditLog(entries: [
                .init(id: 2, at: 5, operatorName: "ada", action: "schema.deploy", detail: "d", container: "iCloud.a"),
                .init(id: 1, at: 4, operatorName: "ada", action: "backup.take", detail: "", container: nil),
            ]))
        // What the dashboard reads: the operator's name under "operator"; a new operator's
        // password beside its account's keys.
        #expect(keys(AuditLog.Entry(id: 1, at: 1, operatorName: "a", action: "x", detail: "", container: nil)).contains("operator"))
        #expect(keys(CreatedOperator(account: account, password: "x")).contains("password"))
        // Every container: `everyContainer: true` wins over a list; neither changes nothing.
        #expect(OperatorChange(containers: ["c"], everyContainer: true).containersToSet == .some(nil))
        #expect(OperatorChange(containers: ["c"]).containersToSet == .some(["c"]))
        #expect(OperatorChange().containersToSet == nil)
    }

    @Test func containersTokensKeysAndSettings() throws {
        try roundTrip(ContainerList(containers: [.init(id: "iCloud.a", createdAt: 3)]))
        try roundTrip(ContainerName(id: "iCloud.a"))
        try roundTrip(APITokenRequest(environment: "development"))
        try roundTrip(APITokenRequest(environment: "production", allowedOrigins: ["https://a.example"], signInCallback: "https://a.example/cb", name: "web"))
        try roundTrip(APITokenCreated(apiToken: "tok"))
        try roundTrip(
            APITokenList(tokens: [
                .init(
                    id: "i", environment: "development", createdAt: 1, revoked: false, allowedOrigins: ["*"], name: nil, lastUsedAt: nil,
                    signInCallback: nil),
                .init(
                    id: "j", environment: "production", createdAt: 2, revoked: true, allowedOrigins: [], name: "web", lastUsedAt: 7,
                    signInCallback: "https://a.example/cb"),
            ]))
        try roundTrip(APITokenRevocation(environment: nil))
        try roundTrip(APITokenRevocation(environment: "production"))
        for what in [Revoked.What.one("k"), .one("12"), .count(12), .done] {
            let decoded = try Revoked(body: try JSON.parse(Revoked(what).json.serialized()))
            #expect(decoded.what == what)
        }
        try roundTrip(ServerKeyList(keys: [.init(keyID: "k", environment: "production", createdAt: 1, revoked: true)]))
        try roundTrip(ServerKeyAddition(environment: "development", publicKeyPEM: "-----BEGIN PUBLIC KEY-----"))
        try roundTrip(ServerKeyAdded(keyID: "k"))
        let limits = [ContainerSettingsView.LimitSetting(name: "recordsPerZone", value: 10, quota: false, set: true, minimum: 1)]
        try roundTrip(ContainerSettingsView(signUp: true, userDiscovery: false, limits: limits, identityProviders: [], apns: nil))
        try roundTrip(
            ContainerSettingsView(
                signUp: false, userDiscovery: true, limits: [],
                identityProviders: [.init(issuer: "https://id.example", audience: "app", jwks: "https://id.example/jwks", createdAt: 2)],
                apns: .init(teamID: "T", keyID: "K", topic: "com.example", updatedAt: 3)))
        try roundTrip(ContainerSettingsChange())
        try roundTrip(ContainerSettingsChange(signUp: true, userDiscovery: false, limits: ["a": 5, "b": Int64?.none]))
        try roundTrip(APNsCredentials(teamID: "T", keyID: "K", topic: "com.example", privateKeyPEM: "-----BEGIN PRIVATE KEY-----"))
        try roundTrip(IdentityProviderAddition(issuer: "https://id.example", audience: "app", jwks: "{}"))
        try roundTrip(IdentityProviderRemoval(issuer: "https://id.example"))
        // A limit set to null goes back to the default; that survives the trip.
        let change = try ContainerSettingsChange(body: try JSON.parse(Array(#"{"limits": {"a": null, "b": 3}}"#.utf8)))
        #expect(change.limits == ["a": Int64?.none, "b": 3])
    }

    @Test func schemaRolesAndGrants() throws {
        let field = SchemaView.Field(name: "title", type: "STRING", indexes: ["QUERYABLE"], applicableIndexes: ["QUERYABLE", "SORTABLE"])
        let type = SchemaView.RecordType(name: "Note", fields: [field], grants: ["_world": ["READ"], "_creator": ["CREATE", "WRITE"]])
        try roundTrip(SchemaView(recordTypes: [type], roles: ["_world", "editor"], refusedWrites: nil))
        try roundTrip(SchemaView(recordTypes: [], roles: [], refusedWrites: [.init(missing: "Note.title", count: 3, lastAt: 9)]))
        // Development answers no refusals at all; production an empty list when there were none.
        #expect(!keys(SchemaView(recordTypes: [], roles: [], refusedWrites: nil)).contains("refusedWrites"))
        #expect(keys(SchemaView(recordTypes: [], roles: [], refusedWrites: [])).contains("refusedWrites"))
        let entry = SchemaFieldEntry(recordType: "Note", field: "title", type: "STRING", indexes: ["SORTABLE"])
        try roundTrip(entry)
        try roundTrip(SchemaFieldEntry(recordType: "Note", field: "title", type: nil, indexes: []))
        try roundTrip(RoleGrant(recordType: "Note", role: "editor", permissions: ["READ"]))
        try roundTrip(RoleGrant(recordType: "Note", role: "editor", permissions: [], granting: false))
        try roundTrip(
            DeployPlan(
                newRecordTypes: ["Note"], newFields: [entry], newIndexes: [], keptFields: [entry], conflicts: ["Note.title: STRING vs INT64"],
                newRoles: ["editor"], changedGrants: [RoleGrant(recordType: "Note", role: "editor", permissions: ["READ"])]))
        try roundTrip(SchemaAdditions(recordTypes: 1, fields: 2, roles: 3))
        try roundTrip(FieldAdded(added: true))
        try roundTrip(SchemaRemoval(recordType: "Note", field: nil))
        try roundTrip(SchemaRemoval(recordType: "Note", field: "title"))
        try roundTrip(SchemaRemoved())
        try roundTrip(FieldIndexes(indexes: []))
        try roundTrip(RoleCreation(name: "editor"))
        try roundTrip(RoleChanged(role: "editor"))
        try roundTrip(RoleChanged(role: "editor", assigned: false))
        try roundTrip(DevelopmentResetConfirmation(confirm: nil))
        try roundTrip(DevelopmentResetConfirmation(confirm: "iCloud.a"))
        try roundTrip(DevelopmentResetOutcome(databases: 1, zones: 2, subscriptions: 3))
        try roundTrip(SchemaText(text: "DEFINE SCHEMA"))
    }

    @Test func people() throws {
        try roundTrip(
            MemberList(users: [
                .init(name: "ann", userID: 1, userRecordName: "_a", joinedAt: 2, discoverable: true, email: "a@x", phone: "+1", fullName: "Ann B"),
                .init(name: "bo", userID: 2, userRecordName: "_b", joinedAt: 3, discoverable: false, email: nil, phone: nil, fullName: nil),
            ]))
        try roundTrip(UserCreation(name: "ann", password: "p"))
        try roundTrip(UserCreation(name: "ann", password: "p", email: "a@x"))
        try roundTrip(UserPassword(password: "p"))
        try roundTrip(UserAccountChanged(name: "ann"))
        try roundTrip(UserAccountChanged(name: "ann", signedOut: true, disabled: false))
        try roundTrip(UserDisabling(disabled: false))
        try roundTrip(UserDeletionOutcome(containers: 1, zones: 2, subscriptions: 3, sharesLeft: 4))
        let subscription = SubscriptionInput(subscriptionID: "s", type: .zone, recordType: "Note", zoneID: WireZoneID(zoneName: "Z"))
        try roundTrip(ConsoleSubscriptionList(subscriptions: [.init(user: "ann", database: "private", createdAt: 1, subscription: subscription)]))
        try roundTrip(ConsoleSubscriptionDeletion(user: "ann", database: "private", subscriptionID: "s"))
        try roundTrip(
            PersonView(
                user: .init(name: "ann", createdAt: 1, disabled: false, userRecordName: "_a"),
                sessions: [.init(session: "h", environment: "development", createdAt: 1, lastUsedAt: 2)],
                pushTokens: [.init(environment: "production", delivery: "APNs production", token: "abc…", deviceID: "d", createdAt: 1)],
                roles: ["development": ["editor"], "production": []],
                subscriptions: [
                    .init(
                        environment: "development", database: "private",
                        list: SubscriptionsResponse(subscriptions: [.success(.subscription(subscription))]))
                ]))
        try roundTrip(
            PersonView(
                user: .init(name: "bo", createdAt: 1, disabled: true, userRecordName: nil), sessions: [], pushTokens: [], roles: [:],
                subscriptions: []))
        try roundTrip(SessionRevocation(session: "h"))
        try roundTrip(RoleAssignment(role: "editor", assigned: false))
        let report = UsageReport(
            publicDatabase: .init(name: nil, usedBytes: 1, quotaBytes: 2, historyBytes: 3),
            users: [.init(name: "ann", usedBytes: 4, quotaBytes: 5, historyBytes: 6)])
        try roundTrip(report)
        // The dashboard reads the public database's usage under "public".
        #expect(keys(report) == ["public", "users"])
    }

    @Test func theRequestLogMetricsBackupsAndTimeTravel() throws {
        let entry = RequestLogEntry(
            id: 7, at: 1, uuid: "u", method: "POST", route: "records/modify", status: 200, ms: 1.25, node: "n1", container: "iCloud.a",
            environment: "development", database: "private", user: "_a", userName: "ann", serverErrorCode: nil, itemErrorCodes: ["CONFLICT"])
        try roundTrip(entry)
        try roundTrip(
            RequestLogPage(requests: [
                entry,
                RequestLogEntry(
                    id: 0, at: 1, uuid: "v", method: "GET", route: "health", status: 200, ms: 0, node: "n1", container: nil, environment: nil,
                    database: nil, user: nil, userName: nil, serverErrorCode: nil, itemErrorCodes: []),
            ]))
        // An export is one JSON object a line, milliseconds to two decimals.
        let line = RequestLogEntry(
            id: 0, at: 1, uuid: "u", method: "GET", route: "r", status: 503, ms: 1.23456, node: "n", container: nil, environment: nil,
            database: nil, user: nil, userName: nil, serverErrorCode: "THROTTLED", itemErrorCodes: []
        ).line
        #expect(line.last == UInt8(ascii: "\n") && line.filter { $0 == UInt8(ascii: "\n") }.count == 1)
        #expect(try RequestLogEntry(body: try JSON.parse(Array(line.dropLast()))).ms == 1.23)
        try roundTrip(MetricsReport(minutes: [.init(start: 60_000, requests: 3, p50: 1.5, p99: 9, errors: ["THROTTLED": 1])]))
        try roundTrip(MetricsReport(minutes: [.init(start: 0, requests: 0, p50: nil, p99: nil, errors: [:])]))
        try roundTrip(
            BackupStatus(
                directory: "/var/backups", keep: 7, running: false, failuresInARow: 1,
                backups: [.init(name: "b1", takenAt: "2026-11-28T09:00:00Z", bytes: 10, nimbusVersion: "1.0")], everySeconds: 3600,
                lastSuccess: .init(at: 5, name: "b1", bytes: 10), lastFailure: .init(at: 6, reason: "disk full")))
        // A server that keeps no backups says only that.
        #expect(BackupStatus.notConfigured.json.serialized() == Array(#"{"configured":false}"#.utf8))
        try roundTrip(BackupStatus.notConfigured)
        try roundTrip(TimeTravelRequest(to: "2026-11-25T10:00:00Z"))
        try roundTrip(TimeTravelRequest(to: "2026-11-25T10:00:00Z", user: "ann", zone: "Notes", apply: true))
        // A form's empty user or zone is none.
        let empty = try TimeTravelRequest(body: try JSON.parse(Array(#"{"to": "x", "user": "", "zone": ""}"#.utf8)))
        #expect(empty.user == nil && empty.zone == nil && !empty.apply)
        try roundTrip(
            TimeTravelReport(
                to: "2026-11-25T10:00:00Z", toMilliseconds: 1, oldestAvailable: "2026-11-20T10:00:00Z", applied: false,
                zones: [
                    .init(
                        zone: "Notes", changes: [.init(recordName: "r", recordType: "Note", change: "restore")],
                        skipped: [.init(recordName: "s", reason: "a newer share")])
                ]))
    }

    /// Wrong types and missing keys come back as BAD_REQUEST naming the spot.
    @Test func badBodiesNameTheSpot() throws {
        func reason<Body: WireBody>(_ type: Body.Type, _ text: String) -> String? {
            do {
                _ = try Body(body: try JSON.parse(Array(text.utf8)))
                return nil
            } catch let error as CloudKitError {
                #expect(error.code == .badRequest)
                return error.reason
            } catch {
                return "\(error)"
            }
        }
        #expect(reason(ContainerSettingsChange.self, #"{"limits": {"recordsPerZone": "ten"}}"#)?.contains("limits.recordsPerZone") == true)
        #expect(reason(ContainerSettingsChange.self, #"{"limits": {"recordsPerZone": 1.5}}"#)?.contains("whole number") == true)
        #expect(reason(ContainerSettingsChange.self, #"{"signUp": "yes"}"#) == "signUp: expected a boolean, got a string")
        #expect(reason(UserDisabling.self, #"{}"#)?.contains("disabled: true to disable") == true)
        #expect(reason(OperatorCreation.self, #"{"role": "viewer"}"#) == "missing required key 'name'")
        #expect(reason(OperatorChange.self, #"{"containers": "c"}"#) == "containers: expected an array, got a string")
        #expect(reason(SchemaFieldEntry.self, #"{"recordType": "Note", "field": "t", "indexes": [1]}"#) == "indexes[0]: expected a string, got a number")
        #expect(reason(TimeTravelRequest.self, #"{"user": "ann"}"#) == "missing required key 'to'")
        #expect(reason(RoleGrant.self, #"{"recordType": "Note", "role": "r", "granting": "no"}"#) == "granting: expected a boolean, got a string")
        #expect(reason(ConsoleSubscriptionDeletion.self, #"{"user": "ann", "database": "private"}"#) == "missing required key 'subscriptionID'")
    }
}
