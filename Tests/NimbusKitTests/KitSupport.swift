import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

extension TestServer {
    /// Creates a user whose devices (containers) sign in on first use.
    func createUser(_ name: String) async throws {
        _ = try await service.createUser(name: name, password: "password-\(name)")
    }

    /// One device of `user`: a container of its own (own device ID, own session).
    func device(of user: String?, environment: NimbusConfiguration.Environment = .development) -> CKContainer {
        CKContainer(configuration: configuration(user: user, environment: environment))
    }

    func configuration(user: String?, environment: NimbusConfiguration.Environment = .development) -> NimbusConfiguration {
        NimbusConfiguration(
            serverURL: URL(string: baseURL)!, apiToken: environment == .development ? developmentToken : productionToken,
            environment: environment, containerIdentifier: TestServer.container, username: user,
            password: user.map { "password-\($0)" })
    }

    /// A signed-in user's device, the user created on the way.
    func signedInDevice(_ user: String) async throws -> CKContainer {
        try await createUser(user)
        return device(of: user)
    }
}

/// Runs `body` and checks it throws a `CKError` with `code`; returns the error.
@discardableResult
func expectCKError(
    _ code: CKError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> CKError? {
    do {
        try await body()
        Issue.record("expected CKError \(code), got success", sourceLocation: sourceLocation)
    } catch let error as CKError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected CKError \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Waits for a completion-handler call.
func awaitCallback<Value: Sendable>(_ start: (@escaping @Sendable (Value) -> Void) -> Void) async -> Value {
    await withCheckedContinuation { continuation in
        start { continuation.resume(returning: $0) }
    }
}

/// A value callbacks append to from other threads.
final class Box<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var _value: Value
    init(_ value: Value) { _value = value }
    var value: Value { lock.withLock { _value } }
    func update(_ change: (inout Value) -> Void) { lock.withLock { change(&_value) } }
}

/// Runs an operation on its database and waits until it finished.
func runOperation(_ operation: CKDatabaseOperation, on database: CKDatabase) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        operation.completionBlock = { continuation.resume() }
        database.add(operation)
    }
}
