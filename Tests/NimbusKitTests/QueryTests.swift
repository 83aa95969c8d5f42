import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

@Suite("NimbusKit queries")
struct QueryTests {
    /// Ten parties in the public database: name, start, guests, tags, location, host reference.
    private func seedParties(_ database: CKDatabase) async throws -> (host: CKRecord, start: Date) {
        let host = CKRecord(recordType: "Host", recordID: CKRecord.ID(recordName: "host"))
        host["name"] = "Nihar"
        _ = try await database.save(host)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        var parties: [CKRecord] = []
        for index in 0..<10 {
            let party = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "party\(index)"))
            party["name"] = "Party \(index)"
            party["summary"] = index % 2 == 0 ? "Post Presentation Beers after session" : "Get Together"
            party["start"] = start.addingTimeInterval(Double(index) * 3600)
            party["guests"] = index
            party["tags"] = index < 5 ? ["early", "small"] : ["late"]
            party["Location"] = CLLocation(latitude: 37.783 + Double(index) * 0.01, longitude: -122.404)
            party["host"] = CKRecord.Reference(record: host, action: .none)
            parties.append(party)
        }
        _ = try await database.modifyRecords(saving: parties, deleting: [])
        return (host, start)
    }

    private func names(_ database: CKDatabase, _ predicate: NSPredicate, sort: [NSSortDescriptor]? = nil) async throws -> [String] {
        let query = CKQuery(recordType: "Party", predicate: predicate)
        query.sortDescriptors = sort ?? [NSSortDescriptor(key: "guests", ascending: true)]
        let (results, _) = try await database.records(matching: query)
        return try results.map { try $0.1.get()["name"] as? String ?? "?" }
    }

    @Test("CloudKit's predicate subset: comparisons, IN, BEGINSWITH, CONTAINS, BETWEEN, NOT, tokens, distance, references")
    func predicateSubset() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("ann").publicCloudDatabase
            let (host, start) = try await seedParties(database)

            try await expectEqual(names(database, NSPredicate(format: "name = %@", "Party 3")), ["Party 3"])
            try await expectEqual(names(database, NSPredicate(format: "%K == %@", "name", "Party 4")), ["Party 4"])
            try await expectEqual(names(database, NSPredicate(format: "guests >= 8")), ["Party 8", "Party 9"])
            try await expectEqual(names(database, NSPredicate(format: "2 > guests")), ["Party 0", "Party 1"])
            try await expectEqual(names(database, NSPredicate(format: "start > %@", start.addingTimeInterval(7.5 * 3600))), ["Party 8", "Party 9"])
            try await expectEqual(names(database, NSPredicate(format: "guests IN %@", [1, 5])), ["Party 1", "Party 5"])
            try await expectEqual(names(database, NSPredicate(format: "guests IN {2, 3}")), ["Party 2", "Party 3"])
            try await expectEqual(names(database, NSPredicate(format: "NOT (guests IN %@)", [0, 1, 2, 3, 4, 5, 6, 7])), ["Party 8", "Party 9"])
            try await expectEqual(names(database, NSPredicate(format: "name BEGINSWITH 'Party 1'")), ["Party 1"])
            try await expectEqual(names(database, NSPredicate(format: "tags CONTAINS %@", "late")).count, 5)
            try await expectEqual(names(database, NSPredicate(format: "'late' IN tags")).count, 5)
            try await expectEqual(names(database, NSPredicate(format: "ANY tags IN %@", ["small", "nope"])).count, 5)
            try await expectEqual(names(database, NSPredicate(format: "guests BETWEEN {3, 5}")), ["Party 3", "Party 4", "Party 5"])
            try await expectEqual(names(database, NSPredicate(format: "guests != 0 AND guests < 3")), ["Party 1", "Party 2"])
            try await expectEqual(names(database, NSPredicate(format: "guests > 1 && guests <= 2")), ["Party 2"])
            try await expectEqual(names(database, NSPredicate(value: true)).count, 10)
            try await expectEqual(names(database, NSPredicate(format: "TRUEPREDICATE")).count, 10)
            #expect(
                try await names(database, NSPredicate(format: "ALL tokenize(%@, 'Cdl') IN allTokens", "after session")).count == 5)
            try await expectEqual(names(database, NSPredicate(format: "self CONTAINS %@", "together")).count, 5)
            try await expectEqual(names(database, NSPredicate(format: "host == %@", host)).count, 10)
            try await expectEqual(names(database, NSPredicate(format: "host == %@", host.recordID)).count, 10)
            try await expectEqual(names(database, NSPredicate(format: "recordID == %@", CKRecord.ID(recordName: "party7"))), ["Party 7"])
            let center = CLLocation(latitude: 37.783, longitude: -122.404)
            #expect(
                try await names(database, NSPredicate(format: "distanceToLocation:fromLocation:(Location, %@) < 2500", center))
                    == ["Party 0", "Party 1", "Party 2"])
            #expect(
                try await names(
                    database, NSPredicate(format: "guests < 3"),
                    sort: [CKLocationSortDescriptor(key: "Location", relativeLocation: CLLocation(latitude: 37.9, longitude: -122.404))])
                    == ["Party 2", "Party 1", "Party 0"])
            #expect(
                try await names(database, NSPredicate(format: "guests < 3"), sort: [NSSortDescriptor(key: "guests", ascending: false)])
                    == ["Party 2", "Party 1", "Party 0"])
            #expect(
                try await names(database, NSPredicate(format: "guests < 2"), sort: [NSSortDescriptor(key: "creationDate", ascending: true)])
                    == ["Party 0", "Party 1"])
        }
    }

    @Test("predicates outside the subset are invalidArguments naming the part", arguments: [
        ("name = 'a' OR name = 'b'", "OR"),
        ("name ENDSWITH 'x'", "ENDSWITH"),
        ("name LIKE 'x*'", "LIKE"),
        ("name = nil", "nil"),
        ("name = ", "ends where a value"),
        ("name = 'unterminated", "unterminated"),
        ("(name = 'a'", "expected ')'"),
        ("name = %@ AND guests = %@", "argument"),
        ("NOT (name = 'a' AND guests = 1)", "NOT"),
        ("FALSEPREDICATE", "FALSEPREDICATE"),
        ("distanceToLocation:fromLocation:(Location, %@) > 5", "distanceToLocation"),
        ("name ~ 'x'", "unexpected character"),
    ])
    func unsupportedPredicates(format: String, mentions: String) async throws {
        try await TestServer.with { server in
            let database = server.device(of: nil).publicCloudDatabase
            let arguments: [Any] = format.contains("distance") ? [CLLocation(latitude: 1, longitude: 2)] : ["only one"]
            let predicate = NSPredicate(format: format, argumentArray: format.contains("%@") ? arguments : [])
            let error = await expectCKError(.invalidArguments) {
                _ = try await database.records(matching: CKQuery(recordType: "Party", predicate: predicate))
            }
            expectEqual(error?.localizedDescription.contains(mentions), true, "\(error?.localizedDescription ?? "")")
        }
    }

    @Test("CKQueryOperation pages with resultsLimit and cursors; desiredKeys trims fields; both callback styles")
    func cursors() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("bo").publicCloudDatabase
            _ = try await seedParties(database)
            let query = CKQuery(recordType: "Party", predicate: NSPredicate(value: true))
            query.sortDescriptors = [NSSortDescriptor(key: "guests", ascending: true)]

            var seen: [String] = []
            var operation = CKQueryOperation(query: query)
            while true {
                operation.resultsLimit = 4
                operation.desiredKeys = ["name"]
                let page = Box<[CKRecord]>([])
                let cursor = Box<CKQueryOperation.Cursor?>(nil)
                operation.recordMatchedBlock = { _, result in page.update { $0.append(try! result.get()) } }
                operation.queryResultBlock = { result in cursor.update { $0 = try! result.get() } }
                await runOperation(operation, on: database)
                #expect(page.value.count <= 4)
                #expect(page.value.allSatisfy { $0.allKeys() == ["name"] })
                seen += page.value.map { $0["name"] as! String }
                guard let next = cursor.value else { break }
                // A cursor survives archiving, as apps keep it between screens.
                let data = try NSKeyedArchiver.archivedData(withRootObject: next, requiringSecureCoding: true)
                let restored = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: CKQueryOperation.Cursor.self, from: data))
                operation = CKQueryOperation(cursor: restored)
            }
            #expect(seen == (0..<10).map { "Party \($0)" })

            // The older blocks, and the convenience call that follows cursors.
            let old = CKQueryOperation(query: query)
            old.resultsLimit = 3
            let fetched = Box<Int>(0)
            old.recordFetchedBlock = { _ in fetched.update { $0 += 1 } }
            let done = Box<(CKQueryOperation.Cursor?, (any Error)?)>((nil, nil))
            old.queryCompletionBlock = { cursor, error in done.update { $0 = (cursor, error) } }
            await runOperation(old, on: database)
            expectEqual(fetched.value, 3)
            #expect(done.value.0 != nil && done.value.1 == nil)

            let (all, error) = await awaitCallback { finish in database.perform(query, inZoneWith: nil) { finish(($0, $1)) } }
            #expect(error == nil)
            expectEqual(all?.count, 10)
        }
    }
}
