import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct ReferenceTests {
    static func ref(_ name: String, _ action: String, zone: String? = nil) -> JSON {
        var reference: JSONObject = ["recordName": .string(name), "action": .string(action)]
        if let zone { reference["zoneID"] = .object(["zoneName": .string(zone)]) }
        return Op.field(.object(reference), "REFERENCE")
    }

    @Test func deletingARecordCascadesThroughDeleteSelfChains() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            let saved = try await alice.modify(zone: "Z", [
                Op.create("shoebox", type: "Shoebox"),
                Op.create("receipt", type: "Receipt", ["owner": Self.ref("shoebox", "DELETE_SELF")]),
                Op.create("line", type: "Line", ["receipt": Self.ref("receipt", "DELETE_SELF")]),
                Op.create("keeper", type: "Note", ["about": Self.ref("shoebox", "NONE")]),
            ])
            #expect(saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text)")
            let token = try #require(try await alice.zoneChanges("Z").zones.first?["syncToken"]?.stringValue)
            let deleted = try await alice.modify(zone: "Z", [Op.delete("shoebox", tag: saved.records[0].changeTag)])
            expectEqual(deleted.records.first?["deleted"], true)
            let lookup = try await alice.lookup(zone: "Z", ["shoebox", "receipt", "line", "keeper"])
            expectEqual(lookup.records.map(\.errorCode), ["NOT_FOUND", "NOT_FOUND", "NOT_FOUND", nil])
            // The cascade shows in the change feed like any other deletion.
            let feed = try #require(try await alice.zoneChanges("Z", token: token).zones.first?["records"]?.arrayValue)
            expectEqual(Set(feed.compactMap { $0["recordName"]?.stringValue }), ["shoebox", "receipt", "line"])
            #expect(feed.allSatisfy { $0["deleted"] == true })
        }
    }

    @Test func firstDeleteWinsForRecordsWithTwoDeleteSelfParents() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("photo"), Op.create("album")])
            let link = try await alice.modify([
                Op.create("in-album", type: "Link", ["photo": Self.ref("photo", "DELETE_SELF"), "album": Self.ref("album", "DELETE_SELF")])
            ])
            #expect(link.records.first?.errorCode == nil)
            _ = try await alice.modify([Op.forceDelete("album")])
            try await expectEqual(alice.lookup(["in-album", "photo"]).records.map(\.errorCode), ["NOT_FOUND", nil])
        }
    }

    @Test func deleteSelfAcrossZonesIsRefusedButNoneIsAllowed() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("A")
            _ = try await alice.createZone("B")
            _ = try await alice.modify(zone: "A", [Op.create("target")])
            let crossDelete = try await alice.modify(zone: "B", [Op.create("x", ["t": Self.ref("target", "DELETE_SELF", zone: "A")])])
            expectEqual(crossDelete.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(crossDelete.records.first?["reason"]?.stringValue?.contains("another zone"), true)
            let crossValidate = try await alice.modify(zone: "B", [Op.create("y", ["t": Self.ref("target", "VALIDATE", zone: "A")])])
            expectEqual(crossValidate.records.first?.errorCode, "BAD_REQUEST")
            let crossNone = try await alice.modify(zone: "B", [Op.create("z", ["t": Self.ref("target", "NONE", zone: "A")])])
            #expect(crossNone.records.first?.errorCode == nil)
            expectEqual(crossNone.records.first?.fieldValue("t")?["zoneID"]?["zoneName"], "A")
        }
    }

    @Test func validateReferencesGuardSavesAndDeletes() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let dangling = try await alice.modify([Op.create("child", ["parent": Self.ref("missing", "VALIDATE")])])
            expectEqual(dangling.records.first?.errorCode, "VALIDATING_REFERENCE_ERROR")
            _ = try await alice.modify([Op.create("parent")])
            let child = try await alice.modify([Op.create("child", ["parent": Self.ref("parent", "VALIDATE")])])
            #expect(child.records.first?.errorCode == nil)
            let blocked = try await alice.modify([Op.forceDelete("parent")])
            expectEqual(blocked.records.first?.errorCode, "VALIDATING_REFERENCE_ERROR")
            expectEqual(blocked.records.first?["reason"]?.stringValue?.contains("child"), true)
            #expect(try await alice.lookup(["parent"]).records.first?.errorCode == nil)
            _ = try await alice.modify([Op.forceDelete("child")])
            try await expectEqual(alice.modify([Op.forceDelete("parent")]).records.first?["deleted"], true)
            // A whole-request status for the same error code, for reference.
            expectEqual(ServerErrorCode.validatingReferenceError.httpStatus, 412)
        }
    }

    @Test func cascadeIsRefusedWhenAValidateReferenceWouldDangle() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("root")])
            _ = try await alice.modify([Op.create("dependent", ["root": Self.ref("root", "DELETE_SELF")])])
            _ = try await alice.modify([Op.create("watcher", ["dependent": Self.ref("dependent", "VALIDATE")])])
            let refused = try await alice.modify([Op.forceDelete("root")])
            expectEqual(refused.records.first?.errorCode, "VALIDATING_REFERENCE_ERROR")
            try await expectEqual(alice.lookup(["root", "dependent"]).records.map(\.errorCode), [nil, nil])
        }
    }

    @Test func batchSavesReferencedRecordsFirstAndKeepsResultOrder() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            // Child before parent in the request; VALIDATE would fail if applied in that order.
            let response = try await alice.modify([
                Op.create("child", ["parent": Self.ref("parent", "VALIDATE")]),
                Op.create("grandchild", ["child": Self.ref("child", "DELETE_SELF")]),
                Op.create("parent"),
            ])
            expectEqual(response.records.map(\.errorCode), [nil, nil, nil], "\(response.text)")
            expectEqual(response.records.compactMap { $0["recordName"]?.stringValue }, ["child", "grandchild", "parent"])
            // Apply order shows in the change tags: parent first.
            let tags = response.records.compactMap { $0.changeTag.flatMap { Int($0, radix: 36) } }
            #expect(tags[2] < tags[0] && tags[0] < tags[1])
        }
    }

    @Test func referenceCyclesInABatchAreReported() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let response = try await alice.modify([
                Op.create("a", ["b": Self.ref("b", "VALIDATE")]),
                Op.create("b", ["a": Self.ref("a", "DELETE_SELF")]),
                Op.create("c"),
            ])
            expectEqual(response.records.map(\.errorCode), ["BAD_REQUEST", "BAD_REQUEST", nil])
            expectEqual(response.records[0]["reason"]?.stringValue?.contains("cycle"), true)
            // NONE references may form cycles freely.
            let loose = try await alice.modify([
                Op.create("x", ["y": Self.ref("y", "NONE")]), Op.create("y", ["x": Self.ref("x", "NONE")]),
            ])
            expectEqual(loose.records.map(\.errorCode), [nil, nil])
        }
    }

    @Test func sevenHundredFiftyDeleteSelfReferrersAreAllowedAndOneMoreRefused() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("popular")])
            let limit = Limits.deleteSelfReferrers.value
            for start in stride(from: 0, to: limit, by: 200) {
                let batch = (start..<min(start + 200, limit)).map { Op.create("fan\($0)", ["p": Self.ref("popular", "DELETE_SELF")]) }
                let saved = try await alice.modify(batch)
                #expect(saved.records.allSatisfy { $0.errorCode == nil })
            }
            let past = try await alice.modify([Op.create("fan-extra", ["p": Self.ref("popular", "DELETE_SELF")])])
            expectEqual(past.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(past.records.first?["limit"], "deleteSelfReferrers")
            // Re-saving an existing referrer does not count it twice.
            let resave = try await alice.modify([Op.make("forceUpdate", Op.record("fan0", fields: ["p": Self.ref("popular", "DELETE_SELF")]))])
            #expect(resave.records.first?.errorCode == nil)
            // Deleting the target takes all 750 with it.
            _ = try await alice.modify([Op.forceDelete("popular")])
            try await expectEqual(alice.lookup(["fan0", "fan749"]).records.map(\.errorCode), ["NOT_FOUND", "NOT_FOUND"])
        }
    }

    @Test func parentReferenceIsStoredAndReturned() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let saved = try await alice.modify([
                Op.make("create", .object(["recordName": "kid", "recordType": "Note", "parent": ["recordName": "folder"]]))
            ])
            expectEqual(saved.records.first?["parent"]?["recordName"], "folder")
            try await expectEqual(alice.lookup(["kid"]).records.first?["parent"]?["recordName"], "folder")
        }
    }
}
