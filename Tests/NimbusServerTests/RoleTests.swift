import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Security roles of the public database (issue 16, docs/roles.md), over HTTP: a permission
/// matrix (each built-in role and a custom one × create, read, write × every endpoint that
/// touches public records), notifications that respect read permission, the defaults, and a
/// randomized multi-user run checked against a model of the rules.
@Suite struct RoleTests {
    static let custom = "PartyAdmin"

    /// The callers of the matrix: Ann creates the records, Bob is any other user, Cy holds the
    /// custom role, and an API token alone is the world.
    struct Cast {
        let ann: APIClient
        let bob: APIClient
        let cy: APIClient
        let world: APIClient

        static func make(_ server: TestServer) async throws -> Cast {
            let cast = Cast(
                ann: try await server.user("ann"), bob: try await server.user("bob"), cy: try await server.user("cy"),
                world: server.client())
            try await server.service.createRole(container: TestServer.container, environment: .development, name: custom)
            try await server.service.assignRole(
                container: TestServer.container, environment: .development, userName: "cy", role: custom, assigned: true)
            return cast
        }

        /// Who holds `role` for a record Ann created.
        func holders(of role: String) -> Set<String> {
            switch role {
            case SecurityRoles.world: ["ann", "bob", "cy", "world"]
            case SecurityRoles.icloud: ["ann", "bob", "cy"]
            case SecurityRoles.creator: ["ann"]
            default: ["cy"]
            }
        }

        var everyone: [(String, APIClient)] { [("ann", ann), ("bob", bob), ("cy", cy), ("world", world)] }
    }

    /// Sets a record type's security to `grants` exactly (every other role: nothing).
    static func setGrants(_ server: TestServer, _ recordType: String, _ grants: [String: RecordPermissions]) async throws {
        for role in SecurityRoles.builtIn + [custom] {
            try await server.service.changeGrant(
                container: TestServer.container, environment: .development, recordType: recordType, role: role,
                permissions: .all, granting: false)
            if let granted = grants[role], !granted.isEmpty {
                try await server.service.changeGrant(
                    container: TestServer.container, environment: .development, recordType: recordType, role: role,
                    permissions: granted, granting: true)
            }
        }
    }

    static func query(_ client: APIClient, _ recordType: String) async throws -> APIResponse {
        try await client.post("public", "records/query", ["query": ["recordType": .string(recordType)]])
    }

    @Test func thePermissionMatrix() async throws {
        try await TestServer.with { server in
            let cast = try await Cast.make(server)
            let permissions: [(String, RecordPermissions)] = [("create", .create), ("read", .read), ("write", .write)]
            for role in SecurityRoles.builtIn + [Self.custom] {
                for (permissionName, permission) in permissions {
                    // A record type per cell, with Ann's record made under the defaults first.
                    let recordType = "T\(role.filter(\.isLetter))\(permissionName)"
                    let existing = "\(recordType)-ann"
                    let made = try await cast.ann.modify("public", [Op.create(existing, type: recordType, ["n": Op.field(1)])])
                    #expect(made.records.first?.errorCode == nil, "\(made.text)")
                    var tag = try #require(made.records.first?["recordChangeTag"]?.stringValue)
                    try await Self.setGrants(server, recordType, [role: permission])
                    let holders = cast.holders(of: role)
                    for (name, client) in cast.everyone {
                        let cell = "\(role) \(permissionName), \(name)"
                        let holds = holders.contains(name)
                        // create: a new record. _creator never creates (it is the creator of what exists).
                        let created = try await client.modify("public", [Op.create("\(recordType)-\(name)-new", type: recordType)])
                        if name == "world" {
                            #expect(created.status == 421, "\(cell): \(created.text)")  // saving needs a user
                        } else {
                            let allowed = permission == .create && holds && role != SecurityRoles.creator
                            expectEqual((created.records.first?.errorCode == nil), allowed, "\(cell) create: \(created.text)")
                            if !allowed { #expect(created.records.first?.errorCode == "ACCESS_DENIED", "\(cell)") }
                        }
                        // read: lookup and query.
                        let mayRead = permission == .read && holds
                        let lookup = try await client.lookup("public", [existing])
                        expectEqual((lookup.records.first?.errorCode == nil), mayRead, "\(cell) lookup: \(lookup.text)")
                        let query = try await Self.query(client, recordType)
                        // Where only creators read, any user's query answers their own records.
                        let readsOwn = role == SecurityRoles.creator && permission == .read && name != "world"
                        if mayRead {
                            expectEqual(query.records.map { $0["recordName"]?.stringValue }, [existing], "\(cell) query: \(query.text)")
                        } else if readsOwn {
                            #expect(query.status == 200 && query.records.isEmpty, "\(cell) query: \(query.text)")
                        } else {
                            #expect(query.status == 403 && query.errorCode == "ACCESS_DENIED", "\(cell) query: \(query.text)")
                        }
                        // subscribe: refused to a caller who may read nothing of the type.
                        if name != "world" {
                            let subscribed = try await client.post(
                                "public", "subscriptions/modify",
                                [
                                    "operations": [
                                        [
                                            "operationType": "create",
                                            "subscription": [
                                                "subscriptionID": .string("s-\(recordType)"), "subscriptionType": "query",
                                                "query": ["recordType": .string(recordType)], "firesOn": ["create", "update"],
                                            ],
                                        ]
                                    ]
                                ])
                            let entry = subscribed.json["subscriptions"]?.arrayValue?.first
                            #expect((entry?["serverErrorCode"] == nil) == (mayRead || readsOwn), "\(cell) subscribe: \(subscribed.text)")
                        }
                        // write: update, then delete, of Ann's record.
                        let mayWrite = permission == .write && holds
                        if name != "world" {
                            let updated = try await client.modify(
                                "public", [Op.make("update", Op.record(existing, type: recordType, tag: tag, fields: ["n": ["value": 2]]))])
                            expectEqual((updated.records.first?.errorCode == nil), mayWrite, "\(cell) update: \(updated.text)")
                            if let newTag = updated.records.first?["recordChangeTag"]?.stringValue { tag = newTag }
                            if !mayWrite { #expect(updated.records.first?.errorCode == "ACCESS_DENIED", "\(cell)") }
                        }
                    }
                    // Delete last (it ends the record): only a writer may.
                    for (name, client) in cast.everyone where name != "world" {
                        let mayWrite = permission == .write && holders.contains(name)
                        guard !mayWrite else { continue }
                        let deleted = try await client.modify("public", [Op.make("forceDelete", Op.record(existing, type: nil))])
                        expectEqual(deleted.records.first?.errorCode, "ACCESS_DENIED", "\(role) \(permissionName), \(name) delete: \(deleted.text)")
                    }
                    if permission == .write, let writer = cast.everyone.first(where: { holders.contains($0.0) && $0.0 != "world" }) {
                        let deleted = try await writer.1.modify("public", [Op.make("forceDelete", Op.record(existing, type: nil))])
                        #expect(deleted.records.first?.errorCode == nil, "\(role) write, \(writer.0) delete: \(deleted.text)")
                    }
                }
            }
        }
    }

    @Test func theDefaultsAreCloudKits() async throws {
        try await TestServer.with { server in
            let cast = try await Cast.make(server)
            let made = try await cast.ann.modify("public", [Op.create("p", type: "Party")])
            let tag = try #require(made.records.first?["recordChangeTag"]?.stringValue, "\(made.text)")
            // The world reads, signed-in users create, the creator writes.
            #expect(try await cast.world.lookup("public", ["p"]).records.first?.errorCode == nil)
            #expect(try await cast.bob.modify("public", [Op.create("q", type: "Party")]).records.first?.errorCode == nil)
            let bobs = try await cast.bob.modify("public", [Op.make("update", Op.record("p", type: "Party", tag: tag, fields: ["n": ["value": 1]]))])
            expectEqual(bobs.records.first?.errorCode, "ACCESS_DENIED")
            expectEqual(bobs.records.first?["reason"]?.stringValue?.contains("grants WRITE to _creator only"), true, "\(bobs.text)")
            let security = try await server.service.security(container: TestServer.container, environment: .development)
            expectEqual(security.grants["Party"], SecurityRoles.defaults)
            expectEqual(security.roles, SecurityRoles.builtIn + [Self.custom])
        }
    }

    @Test func creatorsReadOnlyTheirOwn() async throws {
        try await TestServer.with { server in
            let cast = try await Cast.make(server)
            _ = try await cast.ann.modify("public", [Op.create("a1", type: "Diary")])
            _ = try await cast.bob.modify("public", [Op.create("b1", type: "Diary")])
            try await Self.setGrants(server, "Diary", [SecurityRoles.icloud: .create, SecurityRoles.creator: [.read, .write]])
            try await expectEqual(Self.query(cast.ann, "Diary").records.map { $0["recordName"]?.stringValue }, ["a1"])
            try await expectEqual(Self.query(cast.bob, "Diary").records.map { $0["recordName"]?.stringValue }, ["b1"])
            try await expectEqual(Self.query(cast.world, "Diary").errorCode, "ACCESS_DENIED")
            try await expectEqual(cast.bob.lookup("public", ["a1"]).records.first?.errorCode, "ACCESS_DENIED")
        }
    }

    @Test func notificationsGoOnlyToThoseWhoMayRead() async throws {
        try await TestServer.with { server in
            let cast = try await Cast.make(server)
            _ = try await cast.ann.modify("public", [Op.create("seed", type: "Secret")])  // the type exists
            for client in [cast.bob, cast.cy] {
                try await NotificationTests.subscribe(
                    client, ["subscriptionID": "s", "subscriptionType": "query", "query": ["recordType": "Secret"], "firesOn": ["create"]],
                    in: "public")
            }
            // Then only the custom role may read, and the creator write.
            try await Self.setGrants(server, "Secret", [Self.custom: [.read], SecurityRoles.icloud: .create, SecurityRoles.creator: .write])
            _ = try await cast.ann.modify("public", [Op.create("hidden", type: "Secret")])
            try await waitFor {
                try await cast.cy.device("notifications/changes").json["notifications"]?.arrayValue?.count == 1
            }
            // Bob subscribed while the world could read; he is not told of what he may not read now.
            try await Task.sleep(nanoseconds: 300_000_000)
            try await expectEqual(cast.bob.device("notifications/changes").json["notifications"]?.arrayValue?.isEmpty, true)
        }
    }

    @Test func roleAdministrationRefusesBadInput() async throws {
        try await TestServer.with { server in
            let service = server.service
            let container = TestServer.container
            let first = try await server.user("ann")
            try await expectEqual(first.modify("public", [Op.create("p", type: "Party", ["x": Op.field(1)])]).status, 200)
            func refused(_ words: String, _ body: () async throws -> Void) async {
                do {
                    try await body()
                    Issue.record("accepted: \(words)")
                } catch let error as CloudKitError {
                    #expect(error.reason.contains(words), "\(error.reason)")
                } catch {
                    Issue.record("\(error)")
                }
            }
            await refused("not a valid role name") { try await service.createRole(container: container, environment: .development, name: "_mine") }
            await refused("not a valid role name") { try await service.createRole(container: container, environment: .development, name: "a b") }
            await refused("does not exist") { try await service.createRole(container: "iCloud.nowhere", environment: .development, name: "R") }
            try await service.createRole(container: container, environment: .development, name: "R")
            await refused("exists already") { try await service.createRole(container: container, environment: .development, name: "R") }
            await refused("record type 'Partie' is not in the development schema") {
                try await service.changeGrant(
                    container: container, environment: .development, recordType: "Partie", role: "R", permissions: .read, granting: true)
            }
            await refused("no role 'Ghost'") {
                try await service.changeGrant(
                    container: container, environment: .development, recordType: "Party", role: "Ghost", permissions: .read, granting: true)
            }
            await refused("built-in role") {
                try await service.assignRole(container: container, environment: .development, userName: "ann", role: "_icloud", assigned: true)
            }
            await refused("user 'nobody' does not exist") {
                try await service.assignRole(container: container, environment: .development, userName: "nobody", role: "R", assigned: true)
            }
            await refused("no role 'R' in") {  // roles are per environment until deployed
                try await service.assignRole(container: container, environment: .production, userName: "ann", role: "R", assigned: true)
            }
            try await service.assignRole(container: container, environment: .development, userName: "ann", role: "R", assigned: true)
            await refused("has role 'R' already") {
                try await service.assignRole(container: container, environment: .development, userName: "ann", role: "R", assigned: true)
            }
            // No endpoint hands out roles: a user cannot grant themselves one over the wire.
            let ann = try await server.user("ann2")
            for path in ["roles/assign", "roles/modify", "users/roles"] {
                let response = try await ann.post("public", path, ["role": "R", "userRecordName": .string(ann.userRecordName!)])
                expectEqual(response.status, 404, "\(path): \(response.text)")
            }
            // Deploy copies roles and grants (not who has them) to production.
            try await service.changeGrant(
                container: container, environment: .development, recordType: "Party", role: "R", permissions: .all, granting: true)
            _ = try await service.deploySchema(container: container)
            let production = try await service.security(container: container, environment: .production)
            #expect(production.roles.contains("R") && production.grants["Party"]?["R"] == .all && production.assignments.isEmpty)
        }
    }

    /// Random users do random things under random grants; every answer must be what the
    /// rules (modelled here independently of the server) allow.
    @Test func aRandomizedRunFindsNothingTheRolesForbid() async throws {
        try await TestServer.with { server in
            var generator = SeededGenerator(seed: 0x5EED_0016)
            let names = ["u0", "u1", "u2", "u3"]
            var clients: [String: APIClient] = [:]
            for name in names { clients[name] = try await server.user(name) }
            let container = TestServer.container
            try await server.service.createRole(container: container, environment: .development, name: "Editor")
            var editors = Set<String>()
            for name in names where Bool.random(using: &generator) {
                try await server.service.assignRole(container: container, environment: .development, userName: name, role: "Editor", assigned: true)
                editors.insert(name)
            }
            let types = ["A", "B", "C"]
            var grants: [String: [String: RecordPermissions]] = [:]
            // The types exist (made under the defaults by an admin-free path), then get random grants.
            for type in types {
                _ = try await clients["u0"]!.modify("public", [Op.create("seed-\(type)", type: type)])
                var typeGrants: [String: RecordPermissions] = [:]
                for role in SecurityRoles.builtIn + ["Editor"] {
                    typeGrants[role] = RecordPermissions(rawValue: Int.random(in: 0...7, using: &generator))
                }
                grants[type] = typeGrants
                for role in SecurityRoles.builtIn + ["Editor"] {
                    try await server.service.changeGrant(
                        container: container, environment: .development, recordType: type, role: role, permissions: .all, granting: false)
                    try await server.service.changeGrant(
                        container: container, environment: .development, recordType: type, role: role,
                        permissions: typeGrants[role]!, granting: true)
                }
            }
            func allowed(_ user: String, _ permission: RecordPermissions, _ type: String, creator: String?) -> Bool {
                let g = grants[type]!
                var held = g[SecurityRoles.world]!.union(g[SecurityRoles.icloud]!)
                if let creator, creator == clients[user]!.userRecordName { held.formUnion(g[SecurityRoles.creator]!) }
                if editors.contains(user) { held.formUnion(g["Editor"]!) }
                return held.contains(permission)
            }
            var records: [String: (type: String, creator: String)] = ["seed-A": ("A", "u0"), "seed-B": ("B", "u0"), "seed-C": ("C", "u0")]
            var checked = 0
            for step in 0..<150 {
                let user = names.randomElement(using: &generator)!
                let client = clients[user]!
                let type = types.randomElement(using: &generator)!
                switch Int.random(in: 0..<4, using: &generator) {
                case 0:  // create
                    let name = "r\(step)"
                    let answer = try await client.modify("public", [Op.create(name, type: type)])
                    let ok = answer.records.first?.errorCode == nil
                    expectEqual(ok, allowed(user, .create, type, creator: nil), "step \(step): \(user) create \(type): \(answer.text)")
                    if ok { records[name] = (type, user) }
                case 1:  // lookup
                    guard let (name, record) = records.randomElement(using: &generator) else { continue }
                    let answer = try await client.lookup("public", [name])
                    let ok = answer.records.first?.errorCode == nil
                    #expect(
                        ok == allowed(user, .read, record.type, creator: clients[record.creator]!.userRecordName),
                        "step \(step): \(user) read \(name): \(answer.text)")
                case 2:  // query: never a record the caller may not read
                    let answer = try await Self.query(client, type)
                    for found in answer.records {
                        let name = found["recordName"]?.stringValue ?? ""
                        let creator = records[name].map { clients[$0.creator]!.userRecordName }
                        #expect(allowed(user, .read, type, creator: creator ?? nil), "step \(step): \(user) query \(type) showed \(name)")
                    }
                default:  // forceDelete (a write)
                    guard let (name, record) = records.randomElement(using: &generator) else { continue }
                    let answer = try await client.modify("public", [Op.make("forceDelete", Op.record(name, type: nil))])
                    let ok = answer.records.first?.errorCode == nil
                    #expect(
                        ok == allowed(user, .write, record.type, creator: clients[record.creator]!.userRecordName),
                        "step \(step): \(user) delete \(name): \(answer.text)")
                    if ok { records[name] = nil }
                }
                checked += 1
            }
            #expect(checked > 100)
        }
    }
}

/// A small deterministic generator (SplitMix64), so a failing run can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE5_E4B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
