import Foundation
import NimbusKit
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
                + (SELECT count(*) FROM record_tokens WHERE position(\(bytes) IN convert_to(lexemes::text, 'UTF8')) > 0))::text
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
            #expect(visits == [3, 5, 8])
            let weight: Double? = fetched.encryptedValues["weight"]
            #expect(weight == 71.5)
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

            #expect((fetched.encryptedValues["home"] as? CLLocation)?.coordinate.latitude == 47.37)
            #expect(fetched.encryptedValues["scan"] as? Data == Data(Self.note.utf8))
            #expect(fetched["phone"] == nil, "an encrypted field is not a plain one")
            #expect(Set(fetched.encryptedValues.allKeys()) == ["phone", "visits", "weight", "born", "home", "scan"])
            #expect(fetched["name"] as? String == "plain-visible-name")

            // What the server answers: ENCRYPTED_ types, base64 ciphertext, no plaintext.
            let answer = try await raw.lookup(["p1"])
            let fields = try #require(answer.records.first?["fields"])
            #expect(fields["phone"]?["type"]?.stringValue == "ENCRYPTED_STRING")
            #expect(fields["visits"]?["type"]?.stringValue == "ENCRYPTED_INT64_LIST")
            #expect(fields["home"]?["type"]?.stringValue == "ENCRYPTED_LOCATION")
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
            #expect(moved.status == 200, "\(moved.text)")
            let tampered = await expectCKError(.serverResponseLost) { _ = try await database.record(for: CKRecord.ID(recordName: "p1")) }
            #expect(tampered?.localizedDescription.contains("does not authenticate") == true)

            // The key file is readable by its owner only.
            let enumerator = FileManager.default.enumerator(atPath: keys.path)
            var keyFiles: [String] = []
            while let name = enumerator?.nextObject() as? String {
                if name.hasSuffix(".key") { keyFiles.append(name) }
            }
            #expect(keyFiles.count == 1)
            let mode = try FileManager.default.attributesOfItem(atPath: keys.path + "/" + keyFiles[0])[.posixPermissions] as? NSNumber
            #expect(mode?.intValue == 0o600)
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
            #expect((reset?.userInfo[CKErrorUserDidResetEncryptedDataKey] as? NSNumber)?.boolValue == true)
            #expect(reset?.localizedDescription.contains("importEncryptionKey") == true)

            // Bad keys: garbled, another user's.
            await expectCKError(.invalidArguments) { try await second.importEncryptionKey("NIMBUSKEY1.garbage") }
            await expectCKError(.invalidArguments) { try await second.importEncryptionKey("") }
            let bob = Self.device(server, "bob", keys: bobKeys)
            let bobsKey = try await bob.exportEncryptionKey()
            let foreign = await expectCKError(.invalidArguments) { try await second.importEncryptionKey(bobsKey) }
            #expect(foreign?.localizedDescription.contains("another user") == true)

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
            #expect(refused?.localizedDescription.contains("cannot be an encrypted value") == true)

            let open = CKRecord(recordType: "Patient", recordID: CKRecord.ID(recordName: "r2"))
            open.encryptedValues["phone"] = Self.phone
            let publicRefused = await expectCKError(.invalidArguments) { _ = try await device.publicCloudDatabase.save(open) }
            #expect(publicRefused?.localizedDescription.contains("private database") == true)
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
            #expect(saved.status == 200, "\(saved.text)")
            let looked = try await alice.lookup(["v1"])
            #expect(looked.records.first?["fields"]?["secret"]?["value"]?.stringValue == ciphertext)
            #expect(looked.records.first?["fields"]?["secret"]?["type"]?.stringValue == "ENCRYPTED_STRING")

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
            #expect(schema.fields.first { $0.fieldName == "secret" }?.indexes == 0)
        }
    }
}
