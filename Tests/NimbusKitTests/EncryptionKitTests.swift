import Foundation
@testable import NimbusKit
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// `encryptedValues` (issue 20): NimbusKit seals them with the user's key before they leave the
/// device; the server stores and returns ciphertext it cannot read, never indexes or queries it;
/// another device reads them once the key is carried over, and says "reset" until then.
@Suite("NimbusKit encrypted values")
struct EncryptionKitTests {
    static let phone = "+1 555 0100 secret-phone"
    static let note = "diagnosis: secret-note-text"

    /// A device of `user` whose keys live in a folder of its own (another device, another keychain).
    static func device(_ server: TestServer, _ user: String, keys: URL) -> CKContainer {
        var configuration = server.configuration(user: user)
        configuration.encryptionKeyDirectory = keys
        return CKContainer(configuration: configuration)
    }

    static func temporaryFolder() -> URL {
        URL(fileURLWithPath: NSTemporaryDirectory() + "nimbus-keys-" + UUID().uuidString, isDirectory: true)
    }

    static func patient(_ name: String = "p1") -> CKRecord {
        let record = CKRecord(recordType: "Patient", recordID: CKRecord.ID(recordName: name))
        record["name"] = "plain-visible-name"
        record.encryptedValues["phone"] = phone
        record.encryptedValues["visits"] = [3, 5, 8]
        record.encryptedValues["weight"] = 71.5
        record.encryptedValues["born"] = Date(timeIntervalSince1970: 86_400 * 365)
        record.encryptedValues["home"] = CLLocation(latitude: 47.37, longitude: 8.54)
        record.encryptedValues["scan"] = Data(note.utf8)
        return record
    }

    /// Every file under `folder` holding `needle`.
    static func files(in folder: String, containing needle: String) -> [String] {
        let bytes = Data(needle.utf8)
        let enumerator = FileManager.default.enumerator(atPath: folder)
        var found: [String] = []
        while let name = enumerator?.nextObject() as? String {
            let path = folder + "/" + name
            if let data = FileManager.default.contents(atPath: path), data.range(of: bytes) != nil { found.append(name) }
        }
        return found
    }

    /// Whether what the server keeps holds `needle`'s bytes: its data directory's files, or on
    /// PostgreSQL its records, index entries and search tokens.
    static func stored(_ server: TestServer, contains needle: String) async throws -> Bool {
        guard !TestStorage.isSQLiteFile else { return !files(in: server.dataDirectory, containing: needle).isEmpty }
        let location = try await PostgresTestCluster.location(forDataDirectory: server.dataDirectory)
        let bytes = "convert_to('\(needle.replacingOccurrences(of: "'", with: "''"))', 'UTF8')"
        let rows = try await PostgresTestCluster.rows(
            """
            SELECT ((SELECT count(*) FROM records WHERE position(\(bytes) IN fields) > 0)
                + (SELECT count(*) FROM field_index WHERE position(\(bytes) IN text) > 0)
                + (SELECT count(*) FROM record_tokens WHERE position(\(bytes) IN convert_to(lexemes::text, 'UTF8')) > 0)
                + (SELECT count(*) FROM sealed_keys
                   WHERE position(\(bytes) IN convert_to(coalesce(sealed, '') || coalesce(public_key, '') || name, 'UTF8')) > 0))::text
            """, on: location)
        return rows.first?.first.flatMap { $0.flatMap { Int($0) } } ?? 0 > 0
    }

    @Test("values are sealed on the device: the server's answers and files hold ciphertext only, the device reads them back")
    func roundTripWithoutPlaintextOnTheServer() async throws {
        try await TestServer.with { server in
            let raw = try await server.user("alice")
            let keys = Self.temporaryFolder()
            defer { try? FileManager.default.removeItem(at: keys) }
            let device = Self.device(server, "alice", keys: keys)
            let database = device.privateCloudDatabase
            _ = try await database.save(Self.patient())

            let fetched = try await database.record(for: CKRecord.ID(recordName: "p1"))
            #expect(fetched.encryptedValues["phone"] as? String == Self.phone)
            let visits: [Int]? = (fetched.encryptedValues["visits"] as? [NSNumber])?.map(\.intValue)
            expectEqual(visits, [3, 5, 8])
            let weight: Double? = fetched.encryptedValues["weight"]
            expectEqual(weight, 71.5)
            #expect(fetched.encryptedValues["born"] as? Date == Date(timeIntervalSince1970: 86_400 * 365))

            // An encrypted date comes back as the app saved it, to the last bit (the wire's
            // TIMESTAMP holds milliseconds; a plain date is cut to them, as CloudKit's is).
            // Apps settle conflicts by comparing such dates (Apple's CKSyncEngine sample).
            let exact = Date(timeIntervalSinceReferenceDate: 785_000_000.123_456_789)
            let dated = CKRecord(recordType: "Appointment", recordID: CKRecord.ID(recordName: "dated"))
            dated.encryptedValues["seen"] = exact
            dated.encryptedValues["visits"] = [exact, exact.addingTimeInterval(0.000_3)]
            dated["plainSeen"] = exact
            _ = try await database.save(dated)
            let datedBack = try await database.record(for: dated.recordID)
            #expect(datedBack.encryptedValues["seen"] as? Date == exact)
            #expect(datedBack.encryptedValues["visits"] as? [Date] == [exact, exact.addingTimeInterval(0.000_3)])
            let plainBack = try #require(datedBack["plainSeen"] as? Date)
            #expect(plainBack != exact && abs(plainBack.timeIntervalSince(exact)) < 0.001)

            expectEqual((fetched.encryptedValues["home"] as? CLLocation)?.coordinate.latitude, 47.37)
            #expect(fetched.encryptedValues["scan"] as? Data == Data(Self.note.utf8))
            #expect(fetched["phone"] == nil, "an encrypted field is not a plain one")
            expectEqual(Set(fetched.encryptedValues.allKeys()), ["phone", "visits", "weight", "born", "home", "scan"])
            #expect(fetched["name"] as? String == "plain-visible-name")

            // What the server answers: ENCRYPTED_ types, base64 ciphertext, no plaintext.
            let answer = try await raw.lookup(["p1"])
            let fields = try #require(answer.records.first?["fields"])
            expectEqual(fields["phone"]?["type"]?.stringValue, "ENCRYPTED_STRING")
            expectEqual(fields["visits"]?["type"]?.stringValue, "ENCRYPTED_INT64_LIST")
            expectEqual(fields["home"]?["type"]?.stringValue, "ENCRYPTED_LOCATION")
            for key in ["phone", "visits", "weight", "born", "home", "scan"] {
                let text = try #require(fields[key]?["value"]?.stringValue, "\(key) is not one ciphertext string")
                let bytes = try #require(Data(base64Encoded: text))
                #expect(bytes.range(of: Data(Self.phone.utf8)) == nil && bytes.range(of: Data(Self.note.utf8)) == nil)
            }
            #expect(!answer.text.contains(Self.phone) && !answer.text.contains("secret"))

            // What the server keeps (the SQLite files, or PostgreSQL's rows): the plain field is
            // there (so the search does find text), the encrypted ones are not.
            #expect(try await Self.stored(server, contains: "plain-visible-name"))
            #expect(try await !Self.stored(server, contains: Self.phone))
            #expect(try await !Self.stored(server, contains: Self.note))

            // Ciphertext moved to another field does not open: it is bound to its record and key.
            let phoneCiphertext = try #require(fields["phone"]?["value"])
            let moved = try await raw.modify([
                ["operationType": "forceUpdate", "record": ["recordName": "p1", "recordType": "Patient", "fields": ["alias": ["type": "ENCRYPTED_STRING", "value": phoneCiphertext]]]]
            ])
            expectEqual(moved.status, 200, "\(moved.text)")
            let tampered = await expectCKError(.serverResponseLost) { _ = try await database.record(for: CKRecord.ID(recordName: "p1")) }
            expectEqual(tampered?.localizedDescription.contains("does not authenticate"), true)

            // The key files (the user's key and this device's key pair) are readable by their owner only.
            let enumerator = FileManager.default.enumerator(atPath: keys.path)
            var keyFiles: [String] = []
            while let name = enumerator?.nextObject() as? String {
                if name.hasSuffix(".key") { keyFiles.append(name) }
            }
            expectEqual(keyFiles.count, 2, "\(keyFiles)")
            for file in keyFiles {
                let mode = try FileManager.default.attributesOfItem(atPath: keys.path + "/" + file)[.posixPermissions] as? NSNumber
                expectEqual(mode?.intValue, 0o600)
            }
        }
    }

    @Test("another device says the key was reset until it imports the key; a foreign or garbled key is refused")
    func secondDeviceAfterTheKeyMoves() async throws {
        try await TestServer.with { server in
            try await server.createUser("alice")
            try await server.createUser("bob")
            let firstKeys = Self.temporaryFolder()
            let secondKeys = Self.temporaryFolder()
            let bobKeys = Self.temporaryFolder()
            defer { for folder in [firstKeys, secondKeys, bobKeys] { try? FileManager.default.removeItem(at: folder) } }
            let first = Self.device(server, "alice", keys: firstKeys)
            _ = try await first.privateCloudDatabase.save(Self.patient())

            let second = Self.device(server, "alice", keys: secondKeys)
            let reset = await expectCKError(.zoneNotFound) {
                _ = try await second.privateCloudDatabase.record(for: CKRecord.ID(recordName: "p1"))
            }
            expectEqual((reset?.userInfo[CKErrorUserDidResetEncryptedDataKey] as? NSNumber)?.boolValue, true)
            expectEqual(reset?.localizedDescription.contains("importEncryptionKey"), true)

            // Bad keys: garbled, another user's.
            await expectCKError(.invalidArguments) { try await second.importEncryptionKey("NIMBUSKEY1.garbage") }
            await expectCKError(.invalidArguments) { try await second.importEncryptionKey("") }
            let bob = Self.device(server, "bob", keys: bobKeys)
            let bobsKey = try await bob.exportEncryptionKey()
            let foreign = await expectCKError(.invalidArguments) { try await second.importEncryptionKey(bobsKey) }
            expectEqual(foreign?.localizedDescription.contains("another user"), true)

            // The documented route: export on the first device, import on the second.
            let exported = try await first.exportEncryptionKey()
            try await second.importEncryptionKey(exported)
            let read = try await second.privateCloudDatabase.record(for: CKRecord.ID(recordName: "p1"))
            #expect(read.encryptedValues["phone"] as? String == Self.phone)

            // Both devices write and read each other's values from now on.
            read.encryptedValues["phone"] = "+1 555 0199"
            _ = try await second.privateCloudDatabase.save(read)
            let back = try await first.privateCloudDatabase.record(for: CKRecord.ID(recordName: "p1"))
            #expect(back.encryptedValues["phone"] as? String == "+1 555 0199")
        }
    }

    /// `body`'s answer once it stops failing for a missing key (within five seconds): what
    /// another device does in the background arrives moments later.
    static func eventually<Value>(_ body: () async throws -> Value) async throws -> Value {
        for _ in 0..<40 {
            do {
                return try await body()
            } catch let error as CKError where error.code == .zoneNotFound {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        return try await body()
    }

    /// A key in every form it could be stored in: base64, and base64url without padding.
    static func forms(of key: Data) -> [String] {
        let base64 = key.base64EncodedString()
        return [base64, base64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")]
    }

    static func userKey(_ container: CKContainer, keys: URL) async throws -> Data {
        let user = try await container.userRecordID().recordName
        return try #require(try NimbusFileKeyStore(directory: keys).encryptionKey(containerIdentifier: TestServer.container, userRecordName: user))
    }

    @Test("a second device of the user receives the key from the first without the app moving it, and the server never holds it")
    func secondDeviceReceivesTheKey() async throws {
        try await TestServer.with { server in
            try await server.createUser("alice")
            let firstKeys = Self.temporaryFolder()
            let secondKeys = Self.temporaryFolder()
            defer { for folder in [firstKeys, secondKeys] { try? FileManager.default.removeItem(at: folder) } }
            let first = Self.device(server, "alice", keys: firstKeys)
            let zone = try await first.privateCloudDatabase.save(CKRecordZone(zoneName: "Health"))
            let patient = CKRecord(recordType: "Patient", recordID: CKRecord.ID(recordName: "p1", zoneID: zone.zoneID))
            patient.encryptedValues["phone"] = Self.phone
            _ = try await first.privateCloudDatabase.save(patient)
            _ = try await first.privateCloudDatabase.save(Self.patient("p2"))  // the default zone too

            // The new device asks before it has the key, and says the key is on its way.
            let second = Self.device(server, "alice", keys: secondKeys)
            let waiting = await expectCKError(.zoneNotFound) { _ = try await second.privateCloudDatabase.record(for: patient.recordID) }
            expectEqual((waiting?.userInfo[CKErrorUserDidResetEncryptedDataKey] as? NSNumber)?.boolValue, true)

            // The first device, the next time its app runs (anything), seals the key for it in
            // the background: the second device has it moments later.
            var firstAgain = Self.device(server, "alice", keys: firstKeys)
            let read = try await Self.eventually {
                firstAgain = Self.device(server, "alice", keys: firstKeys)
                _ = try await firstAgain.privateCloudDatabase.record(for: patient.recordID)
                return try await second.privateCloudDatabase.record(for: patient.recordID)
            }
            #expect(read.encryptedValues["phone"] as? String == Self.phone)
            #expect(try await second.privateCloudDatabase.record(for: CKRecord.ID(recordName: "p2")).encryptedValues["phone"] as? String == Self.phone)
            // And writes values the first device reads.
            read.encryptedValues["phone"] = "+1 555 0199 from-the-second"
            _ = try await second.privateCloudDatabase.save(read)
            #expect(try await firstAgain.privateCloudDatabase.record(for: patient.recordID).encryptedValues["phone"] as? String == "+1 555 0199 from-the-second")
            try await expectEqual(Self.userKey(second, keys: secondKeys), Self.userKey(first, keys: firstKeys))

            // What the server keeps: ciphertext and public keys, never a key that opens anything.
            let key = try await Self.userKey(first, keys: firstKeys)
            let me = try await first.userRecordID().recordName
            let zoneKey = FieldCiphers.ownZoneKey(userKey: key, user: me, zoneName: "Health")
            for form in Self.forms(of: key) + Self.forms(of: zoneKey) + [Self.phone, "from-the-second"] {
                #expect(try await !Self.stored(server, contains: form), "the store holds \(form)")
            }
        }
    }

    @Test("participants read and write the encrypted fields of a shared record with the key the share's URL carries; without it they are told")
    func participantsReadEncryptedFieldsOfSharedRecords() async throws {
        try await TestServer.with { server in
            let folders = (0..<4).map { _ in Self.temporaryFolder() }
            defer { for folder in folders { try? FileManager.default.removeItem(at: folder) } }
            for name in ["ann", "bob", "carol"] {
                _ = try await server.service.createUser(
                    name: name, password: "password-\(name)", profile: UserProfile(emailAddress: "\(name)@example.com", nameComponents: .init(givenName: name)))
            }
            let ann = Self.device(server, "ann", keys: folders[0])
            let bob = Self.device(server, "bob", keys: folders[1])
            let carol = Self.device(server, "carol", keys: folders[2])
            for device in [bob, carol] { _ = try await device.userRecordID() }
            let zone = try await ann.privateCloudDatabase.save(CKRecordZone(zoneName: "Trip"))
            let plan = CKRecord(recordType: "Plan", recordID: CKRecord.ID(recordName: "plan", zoneID: zone.zoneID))
            plan["title"] = "Lisbon"
            plan.encryptedValues["budget"] = "budget-4000-EUR"
            let share = CKShare(rootRecord: plan)
            share.publicPermission = .readWrite
            let (saved, _) = try await ann.privateCloudDatabase.modifyRecords(saving: [plan, share], deleting: [])
            let savedShare = try #require(try saved[share.recordID]?.get() as? CKShare)
            let url = try #require(savedShare.url)
            expectEqual(url.fragment?.contains("nk="), true, "\(url)")

            // Bob opens the URL: accepts, reads the encrypted field, writes one Ann reads.
            let bobsMetadata = try await bob.shareMetadata(for: url)
            try await _ = bob.accept(bobsMetadata)
            let sharedZone = try #require(try await bob.sharedCloudDatabase.allRecordZones().first)
            let bobsPlan = try await bob.sharedCloudDatabase.record(for: CKRecord.ID(recordName: "plan", zoneID: sharedZone.zoneID))
            #expect(bobsPlan.encryptedValues["budget"] as? String == "budget-4000-EUR")
            bobsPlan.encryptedValues["budget"] = "budget-5000-EUR"
            _ = try await bob.sharedCloudDatabase.save(bobsPlan)
            #expect(try await ann.privateCloudDatabase.record(for: plan.recordID).encryptedValues["budget"] as? String == "budget-5000-EUR")

            // Bob's second device gets his key from his first, and the zone's key with it.
            let bobsSecond = Self.device(server, "bob", keys: folders[3])
            await expectCKError(.zoneNotFound) { _ = try await bobsSecond.sharedCloudDatabase.record(for: bobsPlan.recordID) }
            let onSecond = try await Self.eventually {
                _ = try await Self.device(server, "bob", keys: folders[1]).privateCloudDatabase.allRecordZones()
                return try await bobsSecond.sharedCloudDatabase.record(for: bobsPlan.recordID)
            }
            #expect(onSecond.encryptedValues["budget"] as? String == "budget-5000-EUR")

            // Carol was handed the URL without its fragment: she joins, and is told the key is missing.
            var bare = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
            bare.fragment = nil
            try await _ = carol.accept(carol.shareMetadata(for: try #require(bare.url)))
            let missing = await expectCKError(.zoneNotFound) { _ = try await carol.sharedCloudDatabase.record(for: bobsPlan.recordID) }
            expectEqual((missing?.userInfo[CKErrorUserDidResetEncryptedDataKey] as? NSNumber)?.boolValue, true)
            expectEqual(missing?.localizedDescription.contains("share's URL"), true, "\(String(describing: missing))")

            // The zone's key never reached the server, in the store or anywhere it logs.
            let fragmentKey = try #require(url.fragment?.split(separator: "=").last.map(String.init))
            let keyStored = try await Self.stored(server, contains: fragmentKey)
            let budgetStored = try await Self.stored(server, contains: "budget-5000-EUR")
            #expect(!keyStored && !budgetStored)
        }
    }

    @Test("references, assets and the public database cannot hold encrypted values: typed errors before anything is sent")
    func unsupportedValues() async throws {
        try await TestServer.with { server in
            try await server.createUser("alice")
            let keys = Self.temporaryFolder()
            defer { try? FileManager.default.removeItem(at: keys) }
            let device = Self.device(server, "alice", keys: keys)
            let record = CKRecord(recordType: "Patient", recordID: CKRecord.ID(recordName: "r1"))
            record.encryptedValues["doctor"] = CKRecord.Reference(recordID: CKRecord.ID(recordName: "d1"), action: .none)
            let refused = await expectCKError(.invalidArguments) { _ = try await device.privateCloudDatabase.save(record) }
            expectEqual(refused?.localizedDescription.contains("cannot be an encrypted value"), true)

            let open = CKRecord(recordType: "Patient", recordID: CKRecord.ID(recordName: "r2"))
            open.encryptedValues["phone"] = Self.phone
            let publicRefused = await expectCKError(.invalidArguments) { _ = try await device.publicCloudDatabase.save(open) }
            expectEqual(publicRefused?.localizedDescription.contains("public database keeps no encrypted values"), true)
        }
    }

    @Test("the server refuses plaintext sent as ENCRYPTED_, encrypted references, and queries or indexes on encrypted fields")
    func serverRules() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let ciphertext = Data((0..<64).map { UInt8($0) }).base64EncodedString()
            func save(_ name: String, _ field: JSON) async throws -> APIResponse {
                try await alice.modify([
                    ["operationType": "create", "record": ["recordName": .string(name), "recordType": "Vault", "fields": ["secret": field]]]
                ])
            }
            // Ciphertext is stored and returned exactly as sent.
            let saved = try await save("v1", ["type": "ENCRYPTED_STRING", "value": .string(ciphertext)])
            expectEqual(saved.status, 200, "\(saved.text)")
            let looked = try await alice.lookup(["v1"])
            expectEqual(looked.records.first?["fields"]?["secret"]?["value"]?.stringValue, ciphertext)
            expectEqual(looked.records.first?["fields"]?["secret"]?["type"]?.stringValue, "ENCRYPTED_STRING")

            // Plaintext under an encrypted type, encrypted references: refused with a reason.
            let plain = try await save("v2", ["type": "ENCRYPTED_STRING", "value": "hello world"])
            #expect(plain.records.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST" || plain.errorCode == "BAD_REQUEST", "\(plain.text)")
            #expect(plain.text.contains("ciphertext"), "\(plain.text)")
            let reference = try await save("v3", ["type": "ENCRYPTED_REFERENCE", "value": .string(ciphertext)])
            #expect(reference.text.contains("BAD_REQUEST"), "\(reference.text)")
            // The field is encrypted in the schema: a plain value of it is a type mismatch.
            let mismatch = try await save("v4", ["type": "STRING", "value": "hello"])
            #expect(mismatch.text.contains("BAD_REQUEST"), "\(mismatch.text)")

            // No query, no sort, no index on it.
            let query = try await alice.post(
                "private", "records/query",
                ["query": ["recordType": "Vault", "filterBy": [["fieldName": "secret", "comparator": "EQUALS", "fieldValue": ["value": .string(ciphertext)]]]]])
            #expect(query.errorCode == "BAD_REQUEST" && query.reason.contains("encrypted"), "\(query.text)")
            let sorted = try await alice.post("private", "records/query", ["query": ["recordType": "Vault", "sortBy": [["fieldName": "secret"]]]])
            #expect(sorted.errorCode == "BAD_REQUEST" && sorted.reason.contains("encrypted"), "\(sorted.text)")
            await #expect(throws: CloudKitError.self) {
                _ = try await server.service.setFieldIndexes(
                    container: TestServer.container, environment: .development, recordType: "Vault", field: "secret",
                    indexes: SchemaFieldRow.Indexes.queryable)
            }
            let schema = try await server.service.schema(container: TestServer.container, environment: .development)
            expectEqual(schema.fields.first { $0.fieldName == "secret" }?.indexes, 0)
        }
    }
}
