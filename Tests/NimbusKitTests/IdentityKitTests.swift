import Foundation
import NimbusCore
import NimbusKit
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// The user record, discoverability and discovery through NimbusKit (issue 16), as a CloudKit
/// app writes them.
@Suite struct IdentityKitTests {
    static func person(_ server: TestServer, _ name: String, email: String, given: String, family: String) async throws -> CKContainer {
        _ = try await server.service.createUser(
            name: name, password: "password-\(name)",
            profile: UserProfile(emailAddress: email, nameComponents: NameComponents(givenName: given, familyName: family)))
        return server.device(of: name)
    }

    @Test func signingInAsAnotherUserOrOutPostsAccountChanged() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            try await server.createUser("ben")
            let container = server.device(of: "ann")
            let heard = Box(0)
            let observer = NotificationCenter.default.addObserver(forName: .CKAccountChanged, object: container, queue: nil) { _ in
                heard.update { $0 += 1 }
            }
            defer { NotificationCenter.default.removeObserver(observer) }
            // The configured user, signed in on first use: the account the app starts with.
            _ = try await container.userRecordID()
            expectEqual(heard.value, 0)
            _ = try await container.signIn(username: "ann", password: "password-ann")
            expectEqual(heard.value, 0, "the same user again is no change")
            _ = try await container.signIn(username: "ben", password: "password-ben")
            expectEqual(heard.value, 1)
            try await container.signOut()
            expectEqual(heard.value, 2)
        }
    }

    @Test func theUserRecordIsFetchedAndSavedByItsUser() async throws {
        try await TestServer.with { server in
            let ann = try await server.signedInDevice("ann")
            let recordID = try await ann.userRecordID()
            let record = try await ann.publicCloudDatabase.record(for: recordID)
            expectEqual(record.recordType, "Users")
            record["partyName"] = "Ann's party"
            let saved = try await ann.publicCloudDatabase.save(record)
            #expect(saved["partyName"] as? String == "Ann's party")
            // Another user reads it, and may not change it.
            let bob = try await server.signedInDevice("bob")
            let seen = try await bob.publicCloudDatabase.record(for: recordID)
            #expect(seen["partyName"] as? String == "Ann's party")
            seen["partyName"] = "Bob's now"
            await expectCKError(.permissionFailure) { _ = try await bob.publicCloudDatabase.save(seen) }
            // The callback form finds the same ID.
            let (callbackID, error) = await awaitCallback { done in ann.fetchUserRecordID { done(($0, $1)) } }
            #expect(error == nil && callbackID == recordID)
        }
    }

    @Test func discoveryFindsWhoOptedIn() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann", email: "ann@example.com", given: "Ann", family: "Lee")
            let bob = try await Self.person(server, "bob", email: "bob@example.com", given: "Bob", family: "Ray")
            let annID = try await ann.userRecordID()
            _ = try await bob.userRecordID()  // Bob has used the app, and has not opted in
            try await expectEqual(ann.applicationPermissionStatus(for: .userDiscoverability), .initialState)
            try await expectEqual(ann.requestApplicationPermission(.userDiscoverability), .granted)
            let (status, statusError) = await awaitCallback { done in
                ann.status(forApplicationPermission: .userDiscoverability) { done(($0, $1)) }
            }
            #expect(status == .granted && statusError == nil)

            let found = try #require(try await bob.userIdentity(forEmailAddress: "ann@example.com"))
            expectEqual(found.userRecordID, annID)
            #expect(found.nameComponents?.givenName == "Ann" && found.nameComponents?.familyName == "Lee")
            #expect(found.hasiCloudAccount)
            #expect(try await ann.userIdentity(forEmailAddress: "bob@example.com") == nil)
            try await expectEqual(bob.userIdentity(forUserRecordID: annID)?.userRecordID, annID)
            try await expectEqual(bob.discoverAllIdentities().map(\.userRecordID), [annID])

            // The operation reports the discovered ones, each with the lookup that found it.
            let discovered = Box<[(CKRecord.ID?, String?)]>([])
            let operation = CKDiscoverUserIdentitiesOperation(
                userIdentityLookupInfos: CKUserIdentity.LookupInfo.lookupInfos(withEmails: ["bob@example.com", "ann@example.com"]))
            operation.userIdentityDiscoveredBlock = { identity, info in
                discovered.update { $0.append((identity.userRecordID, info.emailAddress)) }
            }
            let done: (any Error)? = await awaitCallback { finish in
                operation.discoverUserIdentitiesCompletionBlock = { finish($0) }
                bob.add(operation)
            }
            #expect(done == nil)
            #expect(discovered.value.map(\.0) == [annID] && discovered.value.map(\.1) == ["ann@example.com"])
            let all = CKDiscoverAllUserIdentitiesOperation()
            let everyone = Box<[CKRecord.ID?]>([])
            all.userIdentityDiscoveredBlock = { identity in everyone.update { $0.append(identity.userRecordID) } }
            let allDone: (any Error)? = await awaitCallback { finish in
                all.discoverAllUserIdentitiesCompletionBlock = { finish($0) }
                bob.add(all)
            }
            #expect(allDone == nil && everyone.value == [annID])

            // Withdrawn: found no more.
            try await expectEqual(ann.revokeApplicationPermission(.userDiscoverability), .denied)
            #expect(try await bob.userIdentity(forEmailAddress: "ann@example.com") == nil)
        }
    }
}
