import Foundation
import NimbusWire

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The HTTP side of a container: builds Web Services URLs, sends JSON, turns answers and
/// failures into JSON or `CKError`, and keeps the signed-in session (the web auth token the
/// server hands back on every response, and signing in again when it expires).
final class NimbusTransport: Sendable {
    let configuration: NimbusConfiguration
    private let session: URLSession
    private let state: LockedState

    /// The session state several operations share.
    private final class LockedState: @unchecked Sendable {
        private let lock = NSLock()
        private var _webAuthToken: String?
        private var _userRecordName: String?
        private var _accountChanged: (@Sendable () -> Void)?

        init(webAuthToken: String?) { _webAuthToken = webAuthToken }

        var webAuthToken: String? {
            get { lock.withLock { _webAuthToken } }
            set { lock.withLock { _webAuthToken = newValue } }
        }
        var userRecordName: String? {
            get { lock.withLock { _userRecordName } }
            set { lock.withLock { _userRecordName = newValue } }
        }
        var accountChanged: (@Sendable () -> Void)? {
            get { lock.withLock { _accountChanged } }
            set { lock.withLock { _accountChanged = newValue } }
        }
    }

    init(configuration: NimbusConfiguration) {
        self.configuration = configuration
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.timeoutIntervalForRequest = configuration.requestTimeout
        sessionConfiguration.httpMaximumConnectionsPerHost = 8
        session = URLSession(configuration: sessionConfiguration)
        state = LockedState(webAuthToken: configuration.webAuthToken)
    }

    var webAuthToken: String? { state.webAuthToken }

    /// The signed-in user's record name, once known (after sign-in or `users/caller`).
    var userRecordName: String? { state.userRecordName }

    // MARK: Requests

    /// POSTs `body` to `/database/1/{container}/{environment}/{database}/{path}` and returns the
    /// answer, or throws the `CKError` of a whole-request failure. Signs in first when the
    /// configuration has credentials and no session yet, and once again on an expired session.
    func database(_ scope: CKDatabase.Scope, _ path: String, _ body: JSON, timeout: TimeInterval? = nil)
        async throws(CKError) -> JSON
    {
        try await authenticated(
            "database/1/\(configuration.containerIdentifier)/\(configuration.environment.rawValue)/\(scope.pathComponent)/\(path)",
            body, timeout: timeout)
    }

    /// POSTs to `/device/1/{container}/{environment}/{path}`: push tokens, the notification
    /// collection and the badge, which belong to the user rather than to one database.
    func device(_ path: String, _ body: JSON, timeout: TimeInterval? = nil) async throws(CKError) -> JSON {
        try await authenticated(
            "device/1/\(configuration.containerIdentifier)/\(configuration.environment.rawValue)/\(path)", body,
            timeout: timeout)
    }

    /// Sends with the session, signing in first when the configuration has credentials and no
    /// session yet, and once again on an expired session.
    private func authenticated(_ fullPath: String, _ body: JSON, timeout: TimeInterval?) async throws(CKError) -> JSON {
        var networkFailures = 0
        while true {
            do {
                return try await authenticatedOnce(fullPath, body, timeout: timeout)
            } catch let error {
                // Discretionary work (the 2016 session) waits and tries again until its resource
                // deadline: as the server asks when it is busy, with backoff when the network
                // fails. User-initiated work gets the error at once. A modify is safe to send
                // again: its operationID has the server answer a retry from the first outcome.
                guard let deadline = Self.discretionaryDeadline else { throw error }
                let wait: Double
                switch error.code {
                case .requestRateLimited, .zoneBusy, .serviceUnavailable:
                    guard let seconds = error.retryAfterSeconds, seconds <= Self.longestBusyWait else { throw error }
                    wait = max(seconds, 0)
                case .networkFailure, .networkUnavailable:
                    wait = min(Self.firstNetworkWait * pow(2, Double(networkFailures)), Self.longestNetworkWait)
                    networkFailures += 1
                default:
                    throw error
                }
                guard Date().addingTimeInterval(wait) < deadline else { throw error }
                do {
                    try await Task.sleep(for: .seconds(wait))
                } catch {
                    throw CKError.cancelled()
                }
            }
        }
    }

    /// Set for the requests of an operation whose quality of service is `.utility` or
    /// `.background` (CloudKit's discretionary work, `CKOperation.start`): when its resource
    /// time (`timeoutIntervalForResource`, seven days by default) runs out. Until then requests
    /// retry `requestRateLimited`, `zoneBusy` and `serviceUnavailable` after `retryAfterSeconds`,
    /// and network failures with backoff. Nil: fail fast.
    @TaskLocal static var discretionaryDeadline: Date?
    /// The longest busy wait a discretionary request takes on its own (a longer one is the
    /// app's to decide), and the backoff after network failures: 0.5 s, doubling, at most 30 s.
    static let longestBusyWait: Double = 60
    static let firstNetworkWait: Double = 0.5
    static let longestNetworkWait: Double = 30

    private func authenticatedOnce(_ fullPath: String, _ body: JSON, timeout: TimeInterval?) async throws(CKError) -> JSON {
        if state.webAuthToken == nil, configuration.username != nil { try await signInWithConfiguredCredentials() }
        do {
            return try await send(fullPath, body, timeout: timeout)
        } catch let error where error.userInfo[CKErrorServerErrorCodeKey] as? String == "AUTHENTICATION_REQUIRED"
            && configuration.username != nil
        {
            try await signInWithConfiguredCredentials()
            return try await send(fullPath, body, timeout: timeout)
        }
    }

    /// The WebSocket URL of the notification stream, with the session and this device.
    func notificationStreamURL(after syncToken: String?) async throws(CKError) -> String {
        if state.webAuthToken == nil, configuration.username != nil { try await signInWithConfiguredCredentials() }
        guard
            var components = URLComponents(
                url: configuration.serverURL.appendingPathComponent(
                    "device/1/\(configuration.containerIdentifier)/\(configuration.environment.rawValue)/notifications/connect"),
                resolvingAgainstBaseURL: false)
        else {
            throw CKError(.badContainer, "cannot build a URL from the server URL '\(configuration.serverURL)'")
        }
        var query = [
            URLQueryItem(name: WireKey.ckAPIToken, value: configuration.apiToken),
            URLQueryItem(name: WireKey.ckDeviceID, value: configuration.deviceID),
        ]
        if let token = state.webAuthToken { query.append(URLQueryItem(name: WireKey.ckWebAuthToken, value: token)) }
        if let syncToken { query.append(URLQueryItem(name: WireKey.syncToken, value: syncToken)) }
        components.queryItems = query
        let encodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        components.percentEncodedQuery = encodedQuery
        components.scheme = components.scheme == "https" ? "wss" : "ws"
        guard let url = components.string else {
            throw CKError(.badContainer, "cannot build a URL from the server URL '\(configuration.serverURL)'")
        }
        return url
    }

    /// Signs in at `/auth/1/{container}/{environment}/signin` and keeps the session. An app's
    /// sign-in that changes the user posts `CKAccountChanged`; the first sign-in with the
    /// configuration's credentials is the account the app starts with, and posts nothing.
    @discardableResult
    func signIn(username: String, password: String, announcing: Bool = true) async throws(CKError) -> String {
        let path = "auth/1/\(configuration.containerIdentifier)/\(configuration.environment.rawValue)/signin"
        let answer = try Self.read(
            SignInResponse.self, from: await send(path, SignInRequest(username: username, password: password).json), endpoint: path)
        state.webAuthToken = answer.ckWebAuthToken
        let before = state.userRecordName
        state.userRecordName = answer.userRecordName
        if before != answer.userRecordName, announcing || before != nil { state.accountChanged?() }
        return answer.userRecordName
    }

    /// What to do when the signed-in user changes (the container posts `CKAccountChanged`).
    func onAccountChange(_ action: @escaping @Sendable () -> Void) { state.accountChanged = action }

    func signOut() async throws(CKError) {
        guard let token = state.webAuthToken else { return }
        _ = try await send(
            "auth/1/\(configuration.containerIdentifier)/\(configuration.environment.rawValue)/signout", [:],
            extraQuery: [URLQueryItem(name: WireKey.ckWebAuthToken, value: token)], sendSession: false)
        state.webAuthToken = nil
        if state.userRecordName != nil {
            state.userRecordName = nil
            state.accountChanged?()
        }
    }

    func rememberUserRecordName(_ name: String) { state.userRecordName = name }

    private func signInWithConfiguredCredentials() async throws(CKError) {
        guard let username = configuration.username, let password = configuration.password else { return }
        try await signIn(username: username, password: password, announcing: false)
    }

    private func send(
        _ path: String, _ body: JSON, extraQuery: [URLQueryItem] = [], sendSession: Bool = true,
        timeout: TimeInterval? = nil
    ) async throws(CKError) -> JSON {
        var components = URLComponents(url: configuration.serverURL.appendingPathComponent(path), resolvingAgainstBaseURL: false)
        var query = [URLQueryItem(name: WireKey.ckAPIToken, value: configuration.apiToken)] + extraQuery
        if sendSession, let token = state.webAuthToken { query.append(URLQueryItem(name: WireKey.ckWebAuthToken, value: token)) }
        components?.queryItems = query
        // `+` is legal in a query but servers read it as a space; tokens are base64.
        let encodedQuery = components?.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        components?.percentEncodedQuery = encodedQuery
        guard let url = components?.url else {
            throw CKError(.badContainer, "cannot build a URL from the server URL '\(configuration.serverURL)'")
        }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.timeoutInterval = timeout ?? configuration.requestTimeout
        request.httpBody = Data(body.serialized())
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue(configuration.deviceID, forHTTPHeaderField: "X-Nimbus-Device-ID")

        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await Self.exchange { [session, request] in try await session.data(for: request) }
        } catch {
            throw Self.transportError(error)
        }
        return try answer(data, response, sendSession: sendSession)
    }

    /// An answer as JSON, or the `CKError` it stands for.
    private func answer(_ data: Data, _ response: URLResponse, sendSession: Bool) throws(CKError) -> JSON {
        guard let http = response as? HTTPURLResponse else {
            throw CKError(.serverResponseLost, "the server's answer was not HTTP")
        }
        // The server may hand back a new web auth token on any response: keep the latest.
        if sendSession, let rotated = http.value(forHTTPHeaderField: "X-Apple-CloudKit-Web-Auth-Token"), !rotated.isEmpty {
            state.webAuthToken = rotated
        }
        let retryAfter = http.value(forHTTPHeaderField: "Retry-After").flatMap(Double.init)
        let json: JSON
        do {
            json = try JSON.parse(data)
        } catch {
            throw Self.garbage(status: http.statusCode, data: data, retryAfter: retryAfter)
        }
        guard (200..<300).contains(http.statusCode) else {
            guard let serverError = CloudKitError(json: json) else {
                throw Self.garbage(status: http.statusCode, data: data, retryAfter: retryAfter)
            }
            let error = CKError.fromServer(serverError)
            guard error.retryAfterSeconds == nil, let retryAfter else { throw error }
            throw error.adding([CKErrorRetryAfterKey: retryAfter])
        }
        guard case .object = json else { throw Self.garbage(status: http.statusCode, data: data, retryAfter: nil) }
        return json
    }

    // MARK: Asset bytes

    /// POSTs a file to an upload URL the server handed out (`assets/upload`); the URL is the
    /// credential, so no session goes with it. The body streams from the file; `sent` hears
    /// how many of its bytes are on their way, as they go.
    func uploadFile(_ fileURL: URL, to url: String, sent: @escaping @Sendable (Int64) -> Void) async throws(CKError) -> Asset {
        let request = try uploadRequest(to: url)
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await Self.exchange { [session, request] in
                try await session.upload(for: request, fromFile: fileURL, delegate: UploadProgress(sent))
            }
        } catch {
            throw Self.transportError(error)
        }
        return try Self.read(AssetUploadResult.self, from: answer(data, response, sendSession: false), endpoint: "the upload URL")
            .singleFile
    }

    /// The bytes of one request of a resumable upload: a piece the app's stop loses at most.
    static let resumablePieceBytes: Int64 = 4 << 20

    /// Sends a file to an upload URL resumably (docs/assets.md, "Resumable uploads"): asks the
    /// server how many of its bytes it holds (an earlier launch may have sent some), then sends
    /// the rest in pieces of `resumablePieceBytes`, each kept by the server as it arrives, so an
    /// app stopped mid-upload sends only what is missing when it resumes. Throws `assetFileModified`
    /// when the file is not `size` bytes any more, and the server's refusal when the URL cannot
    /// be resumed (expired or spent): ask `assets/upload` for another.
    func uploadFileResumably(
        _ fileURL: URL, to url: String, size: Int64, sent: @escaping @Sendable (Int64) -> Void
    ) async throws(CKError) -> Asset {
        let post = try uploadRequest(to: url)
        guard let handle = try? FileHandle(forReadingFrom: fileURL) else {
            throw CKError(.assetFileNotFound, "the asset's file \(fileURL.path) does not exist or cannot be read")
        }
        defer { try? handle.close() }
        var held = try await heldBytes(at: post)
        // A server that is still winding up the request the app's stop broke says so
        // (`TRY_AGAIN_LATER`), or holds other bytes than it said (`BAD_REQUEST`): ask it
        // again where it stands, a few times.
        var setbacks = 0
        while true {
            if Task.isCancelled { throw CKError.cancelled() }
            guard held <= size else {
                throw CKError(.assetFileModified, "the server holds \(held) bytes of a \(size)-byte file: the file changed")
            }
            let length = min(Self.resumablePieceBytes, size - held)
            let piece: Data
            do {
                try handle.seek(toOffset: UInt64(held))
                piece = try handle.read(upToCount: Int(length)) ?? Data()
            } catch {
                throw CKError(.assetFileNotFound, "reading the asset's file \(fileURL.path) failed: \(error)")
            }
            guard piece.count == Int(length) else {
                throw CKError(.assetFileModified, "the asset's file \(fileURL.path) is shorter than the \(size) bytes it had")
            }
            let last = held + length == size
            var request = post
            request.setValue(String(held), forHTTPHeaderField: ResumableUploadHeader.offset)
            request.setValue(ResumableUploadHeader.text(last), forHTTPHeaderField: ResumableUploadHeader.complete)
            let start = held
            let data: Data
            let response: URLResponse
            do {
                (data, response) = try await Self.exchange { [session, request] in
                    try await session.upload(for: request, from: piece, delegate: UploadProgress { sent(start + $0) })
                }
            } catch {
                throw Self.transportError(error)
            }
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            if status == 204, let offset = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: ResumableUploadHeader.offset).flatMap(Int64.init) {
                held = offset
                continue
            }
            do throws(CKError) {
                return try Self.read(AssetUploadResult.self, from: answer(data, response, sendSession: false), endpoint: "the upload URL")
                    .singleFile
            } catch where setbacks < 10 && [.serviceUnavailable, .invalidArguments].contains(error.code) {
                setbacks += 1
                try? await Task.sleep(for: .milliseconds(200))
                held = try await heldBytes(at: post)
            }
        }
    }

    /// A POST of a file's bytes to an upload URL the server handed out (`assets/upload`).
    private func uploadRequest(to url: String) throws(CKError) -> URLRequest {
        guard let target = URL(string: url) else {
            throw CKError(.serverResponseLost, "the server's upload URL does not read as a URL: \(url.debugDescription)")
        }
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        request.timeoutInterval = max(configuration.requestTimeout, 300)
        return request
    }

    /// The bytes of a resumable upload the server holds (`HEAD` on the URL `post` sends to).
    private func heldBytes(at post: URLRequest) async throws(CKError) -> Int64 {
        var request = post
        request.httpMethod = "HEAD"
        request.timeoutInterval = configuration.requestTimeout
        let response: URLResponse
        do {
            (_, response) = try await Self.exchange { [session, request] in try await session.data(for: request) }
        } catch {
            throw Self.transportError(error)
        }
        guard let http = response as? HTTPURLResponse else { throw CKError(.serverResponseLost, "the server's answer was not HTTP") }
        guard http.statusCode == 204, let held = http.value(forHTTPHeaderField: ResumableUploadHeader.offset).flatMap(Int64.init) else {
            // A HEAD has no body to say why: the URL expired, was spent or is not one.
            throw CKError(.permissionFailure, "the upload URL can no longer be resumed (HTTP \(http.statusCode)); ask for another")
        }
        return held
    }

    /// Hears an upload's bytes leave, for `uploadFile`'s `sent`.
    private final class UploadProgress: NSObject, URLSessionTaskDelegate, Sendable {
        let sent: @Sendable (Int64) -> Void

        init(_ sent: @escaping @Sendable (Int64) -> Void) { self.sent = sent }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64,
            totalBytesExpectedToSend: Int64
        ) {
            sent(totalBytesSent)
        }
    }

    /// GETs an asset's bytes from its download URL into `destination` (a file of its own,
    /// replaced when there), through a temporary file so a broken download leaves nothing.
    func downloadFile(from url: String, to destination: URL) async throws(CKError) {
        // CloudKit's download URLs hold a `${f}` for the client's file name.
        guard let source = URL(string: url.replacingOccurrences(of: "${f}", with: "asset")) else {
            throw CKError(.serverResponseLost, "the asset's download URL does not read as a URL: \(url.debugDescription)")
        }
        var request = URLRequest(url: source)
        request.timeoutInterval = max(configuration.requestTimeout, 300)
        let temporary: URL
        let response: URLResponse
        do {
            (temporary, response) = try await Self.exchange { [session, request] in try await session.download(for: request) }
        } catch {
            throw Self.transportError(error)
        }
        guard let http = response as? HTTPURLResponse, http.statusCode == 200 else {
            let data = (try? Data(contentsOf: temporary)) ?? Data()
            try? FileManager.default.removeItem(at: temporary)
            _ = try answer(data, response, sendSession: false)
            throw CKError(.serverResponseLost, "the asset's download answered without its bytes")
        }
        do {
            try FileManager.default.createDirectory(
                at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
            _ = try? FileManager.default.removeItem(at: destination)
            try FileManager.default.moveItem(at: temporary, to: destination)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw CKError(.internalError, "could not keep the downloaded asset at \(destination.path): \(error)")
        }
    }

    /// An answer read as its wire type (NimbusWire's, the type the server wrote it from); one
    /// that does not read is a lost response, naming what was wrong.
    static func read<Response: WireBody>(_ type: Response.Type, from json: JSON, endpoint: String) throws(CKError) -> Response {
        do {
            return try Response(body: json)
        } catch {
            throw CKError(.serverResponseLost, "the server's answer to \(endpoint) does not read: \(error.reason)")
        }
    }

    /// An answer that is not CloudKit JSON. Overload statuses keep their meaning (and their
    /// Retry-After), anything else is a lost response.
    private static func garbage(status: Int, data: Data, retryAfter: Double?) -> CKError {
        let preview = String(decoding: data.prefix(120), as: UTF8.self)
        let code: CKError.Code = status == 503 ? .serviceUnavailable : status == 429 ? .requestRateLimited : .serverResponseLost
        var info: [String: Any] = [:]
        if let retryAfter { info[CKErrorRetryAfterKey] = retryAfter }
        return CKError(
            code, "the server answered HTTP \(status) with something that is not CloudKit JSON: \(preview.debugDescription)",
            userInfo: info)
    }

    /// URLSession's failures as CloudKit reports them.
    /// One URLSession call, cancelled as far as the platform allows. On Apple platforms Swift's
    /// cancellation reaches URLSession, which stops the transfer. On Linux it must not:
    /// swift-corelibs-foundation crashes the process ("Trying to access a behaviour for a task
    /// that in not in the registry"), or loses the answer and hangs the caller, when a task is
    /// cancelled as it finishes (its cancel looks the task up after the task left the session).
    /// There a cancelled caller stops waiting at once, and the transfer runs on unobserved to its
    /// end: one request, or one upload piece (`resumablePieceBytes`), never the loop around them.
    private static func exchange<T: Sendable>(_ call: @escaping @Sendable () async throws -> T) async throws -> T {
        #if canImport(FoundationNetworking)
        try Task.checkCancellation()
        let outcome = FirstOutcome<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                outcome.deliver(to: continuation)
                // Unstructured: the caller's cancellation does not reach it.
                Task {
                    do { outcome.settle(.success(try await call())) } catch { outcome.settle(.failure(error)) }
                }
            }
        } onCancel: {
            outcome.settle(.failure(CancellationError()))
        }
        #else
        return try await call()
        #endif
    }

    private static func transportError(_ error: any Error) -> CKError {
        if error is CancellationError { return .cancelled() }
        let nsError = error as NSError
        if nsError.domain == NSURLErrorDomain {
            switch nsError.code {
            case NSURLErrorCancelled:
                return .cancelled()
            case NSURLErrorNotConnectedToInternet, NSURLErrorDataNotAllowed, NSURLErrorInternationalRoamingOff:
                return CKError(.networkUnavailable, "no network: \(nsError.localizedDescription)", userInfo: [NSUnderlyingErrorKey: nsError])
            default:
                return CKError(
                    .networkFailure, "could not reach the Nimbus server: \(nsError.localizedDescription)",
                    userInfo: [NSUnderlyingErrorKey: nsError])
            }
        }
        return CKError(.networkFailure, "request failed: \(error)")
    }
}

extension JSON {
    static func parse(_ data: Data) throws -> JSON {
        try data.withUnsafeBytes { try JSON.parse($0) }
    }
}

/// The first of several outcomes (an answer, a cancellation), handed to a continuation that
/// may come before or after it.
private final class FirstOutcome<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<T, any Error>?
    private var continuation: CheckedContinuation<T, any Error>?

    func deliver(to continuation: CheckedContinuation<T, any Error>) {
        let ready: Result<T, any Error>? = lock.withLock {
            if result == nil { self.continuation = continuation }
            return result
        }
        if let ready { continuation.resume(with: ready) }
    }

    func settle(_ outcome: Result<T, any Error>) {
        let waiting: CheckedContinuation<T, any Error>? = lock.withLock {
            guard result == nil else { return nil }
            result = outcome
            defer { continuation = nil }
            return continuation
        }
        waiting?.resume(with: outcome)
    }
}
