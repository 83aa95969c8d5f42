import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NimbusKit
import NimbusTestSupport
import ServiceLifecycle
import Testing

/// What an app sees when things go wrong: typed CKErrors with a reason, never a crash.
@Suite("NimbusKit failures")
struct FailureTests {
    @Test("a server that is not there is networkFailure")
    func serverDown() async throws {
        let container = CKContainer(
            configuration: NimbusConfiguration(serverURL: URL(string: "http://127.0.0.1:1")!, apiToken: "x", requestTimeout: 5))
        let error = await expectCKError(.networkFailure) {
            _ = try await container.publicCloudDatabase.record(for: CKRecord.ID(recordName: "a"))
        }
        expectEqual(error?.localizedDescription.contains("could not reach"), true)
        let (status, statusError) = await awaitCallback { done in container.accountStatus { done(($0, $1)) } }
        expectEqual(status, .couldNotDetermine)
        expectEqual((statusError as? CKError)?.code, .networkFailure)
    }

    @Test("a server that answers garbage: serverResponseLost, serviceUnavailable with Retry-After, or the server's code")
    func garbage() async throws {
        try await withGarbageServer { port in
            func container(_ path: String) -> CKContainer {
                CKContainer(
                    configuration: NimbusConfiguration(serverURL: URL(string: "http://127.0.0.1:\(port)/\(path)")!, apiToken: "x"))
            }
            let id = CKRecord.ID(recordName: "a")
            let html = await expectCKError(.serverResponseLost) { _ = try await container("html").publicCloudDatabase.record(for: id) }
            expectEqual(html?.localizedDescription.contains("not CloudKit JSON"), true)
            let busy = await expectCKError(.serviceUnavailable) { _ = try await container("busy").publicCloudDatabase.record(for: id) }
            expectEqual(busy?.retryAfterSeconds, 7)
            let throttled = await expectCKError(.requestRateLimited) {
                _ = try await container("throttled").publicCloudDatabase.record(for: id)
            }
            expectEqual(throttled?.retryAfterSeconds, 3)
            #expect(throttled?.userInfo[CKErrorRetryAfterKey] as? Double == 3)
            await expectCKError(.serverResponseLost) { _ = try await container("array").publicCloudDatabase.record(for: id) }

            // The SDK keeps the newest web auth token the server hands back and sends it next.
            var rotating = NimbusConfiguration(serverURL: URL(string: "http://127.0.0.1:\(port)/rotate")!, apiToken: "x")
            rotating.webAuthToken = "t0"
            let rotatingContainer = CKContainer(configuration: rotating)
            let firstEcho = try await rotatingContainer.publicCloudDatabase.record(for: id)
            #expect(firstEcho["seen"] as? String == "t0")
            expectEqual(rotatingContainer.webAuthToken, "t0-next")
            let secondEcho = try await rotatingContainer.publicCloudDatabase.record(for: id)
            #expect(secondEcho["seen"] as? String == "t0-next")

            // An operation's request timeout bounds each request; a user-initiated one fails
            // then (a discretionary one would retry until its resource deadline).
            let slow = CKFetchRecordsOperation(recordIDs: [id])
            slow.configuration.timeoutIntervalForRequest = 0.3
            slow.configuration.qualityOfService = .userInitiated
            let outcome = Box<(any Error)?>(nil)
            slow.fetchRecordsResultBlock = { result in if case .failure(let error) = result { outcome.update { $0 = error } } }
            let started = Date()
            await runOperation(slow, on: container("slow").publicCloudDatabase)
            // The server takes 5 s; well under that means the 0.3 s timeout cut the request (the
            // margin is for a loaded machine: beside the whole suite it once took 1.7 s).
            #expect(Date().timeIntervalSince(started) < 3)
            let partial = (outcome.value as? CKError)?.partialErrorsByItemID?[id] as? CKError
            #expect(((outcome.value as? CKError)?.code == .networkFailure) || partial?.code == .networkFailure, "\(String(describing: outcome.value))")
            await expectCKError(.serverResponseLost) { _ = try await container("badrecord").publicCloudDatabase.record(for: id) }
        }
    }

    @Test("no user: private database calls are notAuthenticated, account status is noAccount; a bad API token too")
    func notAuthenticated() async throws {
        try await TestServer.with { server in
            let anonymous = server.device(of: nil)
            try await expectEqual(anonymous.accountStatus(), .noAccount)
            await expectCKError(.notAuthenticated) { _ = try await anonymous.privateCloudDatabase.allRecordZones() }
            await expectCKError(.notAuthenticated) { _ = try await anonymous.publicCloudDatabase.save(CKRecord(recordType: "Party")) }

            var forged = server.configuration(user: nil)
            forged.apiToken = "forged"
            await expectCKError(.notAuthenticated) {
                _ = try await CKContainer(configuration: forged).publicCloudDatabase.record(for: CKRecord.ID(recordName: "a"))
            }

            try await server.createUser("eve")
            var wrongPassword = server.configuration(user: "eve")
            wrongPassword.password = "nope"
            await expectCKError(.notAuthenticated) { _ = try await CKContainer(configuration: wrongPassword).userRecordID() }
        }
    }

    @Test("sign-in keeps the session; an expired session signs in again; userRecordID is stable")
    func sessions() async throws {
        try await TestServer.with { server in
            try await server.createUser("fay")
            let manual = server.device(of: nil)
            let id = try await manual.signIn(username: "fay", password: "password-fay")
            try await expectEqual(manual.accountStatus(), .available)
            try await expectEqual(manual.userRecordID(), id)
            let token = try #require(manual.webAuthToken)

            // A second launch reuses the kept token without signing in.
            var relaunch = server.configuration(user: nil)
            relaunch.webAuthToken = token
            try await expectEqual(CKContainer(configuration: relaunch).userRecordID(), id)

            let automatic = server.device(of: "fay")
            try await expectEqual(automatic.userRecordID(), id)
            _ = try await server.service.revokeSessions(userName: "fay")
            // The session is gone; the configured credentials sign in again transparently.
            try await expectEqual(automatic.userRecordID(), id)
            await expectCKError(.notAuthenticated) { _ = try await manual.userRecordID() }

            try await automatic.signOut()
            #expect(automatic.webAuthToken == nil)
        }
    }
}

/// A server that answers every request with something CloudKit clients cannot use.
private func withGarbageServer(_ body: (Int) async throws -> Void) async throws {
    let router = Router()
    router.post("html/**") { _, _ in Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: "<html>oops</html>"))) }
    router.post("busy/**") { _, _ in
        Response(status: .serviceUnavailable, headers: [.retryAfter: "7"], body: .init(byteBuffer: ByteBuffer(string: "down")))
    }
    router.post("throttled/**") { _, _ in
        Response(
            status: .tooManyRequests,
            body: .init(byteBuffer: ByteBuffer(string: #"{"serverErrorCode":"THROTTLED","reason":"slow down","retryAfter":3}"#)))
    }
    // Hands back a new web auth token on every answer, and reports the one it was sent.
    router.post("rotate/**") { request, _ in
        let seen = request.uri.queryParameters["ckWebAuthToken"].map(String.init) ?? "none"
        let body = #"{"records":[{"recordName":"a","recordType":"Echo","fields":{"seen":{"value":"\#(seen)","type":"STRING"}}}]}"#
        return Response(
            status: .ok, headers: [HTTPField.Name("X-Apple-CloudKit-Web-Auth-Token")!: seen + "-next"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }
    router.post("slow/**") { _, _ in
        try await Task.sleep(nanoseconds: 5_000_000_000)
        return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: "{}")))
    }
    router.post("array/**") { _, _ in Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: "[1,2]"))) }
    router.post("badrecord/**") { _, _ in
        Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: #"{"records":[{"recordName":"a","fields":{}}]}"#)))
    }
    let (ports, continuation) = AsyncStream<Int>.makeStream()
    let app = Application(
        router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in
            continuation.yield(channel.localAddress?.port ?? 0)
            continuation.finish()
        }, logger: Logger(label: "garbage"))
    let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "garbage"))
    let task = Task { try await group.run() }
    var iterator = ports.makeAsyncIterator()
    let port = await iterator.next() ?? 0
    do {
        try await body(port)
    } catch {
        await group.triggerGracefulShutdown()
        throw error
    }
    await group.triggerGracefulShutdown()
    _ = try? await task.value
}
