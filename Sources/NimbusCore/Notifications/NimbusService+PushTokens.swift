import Crypto
import Foundation
import NimbusStorage
import NimbusWire

/// `tokens/create` and `tokens/register` (reference §11): where a user's pushes go.
extension NimbusService {
    /// How long a web-courier token is valid, in seconds (reference §14: `ttl=43200`).
    public static let webCourierLifetimeSeconds = 43_200

    /// `tokens/create`: a web-courier token for a client without APNs (a browser, CloudKit JS).
    /// Its pushes wait at `webcourierURL` for the client's long poll.
    public func createWebCourierToken(_ caller: Caller, body: ObjectReader, baseURL: String) async throws
        -> PushTokenResponse
    {
        let owner = try notificationOwner(caller, for: "Push registration")
        let apnsEnvironment = try Self.apnsEnvironment(body)
        let token = Credentials.base64URL(Credentials.randomBytes(32))
        let row = PushTokenRow(
            owner: owner, token: token, apnsEnvironment: apnsEnvironment, isWebCourier: true, deviceID: caller.deviceID,
            createdAt: now)
        try await storage.push.putPushToken(row)
        return PushTokenResponse(
            apnsEnvironment: apnsEnvironment, apnsToken: token,
            webcourierURL: "\(baseURL)/webcourier/aps?tok=\(token)&ttl=\(Self.webCourierLifetimeSeconds)")
    }

    /// `tokens/register`: binds a device's APNs token (64 hex digits, or the base64 of its 32
    /// bytes) or a web-courier token from `tokens/create` to the signed-in user.
    public func registerPushToken(_ caller: Caller, body: ObjectReader) async throws -> PushTokenResponse {
        let owner = try notificationOwner(caller, for: "Push registration")
        let apnsEnvironment = try Self.apnsEnvironment(body)
        let given = try body.requiredString(WireKey.apnsToken)
        let now = self.now
        // A web-courier token is registered already (by tokens/create), to its owner for good.
        if let courier = try await storage.push.pushToken(given), courier.isWebCourier {
            guard courier.owner == owner else {
                throw CloudKitError(.accessDenied, "\(WireKey.apnsToken): this web-courier token belongs to another user")
            }
            return PushTokenResponse(apnsEnvironment: apnsEnvironment, apnsToken: given)
        }
        guard let deviceToken = Self.apnsDeviceToken(given) else {
            throw CloudKitError.badRequest(
                "\(WireKey.apnsToken): expected an APNs device token (64 hexadecimal digits, or the base64 of its 32 bytes) or a token from tokens/create")
        }
        try await storage.push.putPushToken(
            PushTokenRow(
                owner: owner, token: deviceToken, apnsEnvironment: apnsEnvironment, isWebCourier: false,
                deviceID: caller.deviceID, createdAt: now))
        return PushTokenResponse(apnsEnvironment: apnsEnvironment, apnsToken: deviceToken)
    }

    private static func apnsEnvironment(_ body: ObjectReader) throws(CloudKitError) -> String {
        let value = try body.string(WireKey.apnsEnvironment) ?? "production"
        guard value == "development" || value == "production" else {
            throw .badRequest("\(WireKey.apnsEnvironment): '\(Names.escaped(value))' is not an APNs environment; use development or production")
        }
        return value
    }

    /// An APNs device token as lowercase hex, from hex or base64 (CloudKit JS sends base64).
    static func apnsDeviceToken(_ text: String) -> String? {
        let hexDigits = Set("0123456789abcdef".utf8)
        let lowered = text.lowercased()
        if lowered.utf8.count == 64, lowered.utf8.allSatisfy(hexDigits.contains) { return lowered }
        if text.utf8.count <= 64, let bytes = Credentials.fromBase64URL(text), bytes.count == 32 {
            return Credentials.hex(bytes)
        }
        return nil
    }

    /// The collection token just after a stored notification.
    public func notificationToken(for row: NotificationRow) -> String {
        notificationToken(row.owner, sequence: row.sequence)
    }

    // MARK: Delivery's side

    /// The tokens pushes for `owner` go to: APNs device tokens and web-courier tokens.
    public func pushTokens(of owner: NotificationOwner) async throws -> [PushTokenRow] {
        try await storage.push.pushTokens(owner: owner)
    }

    /// A registered token, or nil (web-courier polls name theirs).
    public func pushToken(_ token: String) async throws -> PushTokenRow? {
        try await storage.push.pushToken(token)
    }

    /// Forgets a token APNs says is no longer valid (410 `Unregistered`, `BadDeviceToken`), or
    /// an expired web-courier token.
    public func removePushToken(_ token: String) async throws {
        try await storage.push.deletePushToken(token)
    }

    /// The web-courier token a long poll names (`GET /webcourier/aps?tok=…`). Unknown tokens
    /// and APNs device tokens are refused; a token past its lifetime is removed and refused.
    public func webCourierToken(_ token: String) async throws -> PushTokenRow {
        guard let row = try await pushToken(token), row.isWebCourier else {
            throw CloudKitError(.notFound, "unknown web-courier token; get one from tokens/create and register it")
        }
        guard now - row.createdAt < Int64(Self.webCourierLifetimeSeconds) * 1_000 else {
            try await removePushToken(token)
            throw CloudKitError(
                .authenticationFailed, "this web-courier token expired after \(Self.webCourierLifetimeSeconds) seconds; get a new one from tokens/create")
        }
        return row
    }

    // MARK: APNs credentials

    /// Stores a container's APNs provider key (`nimbus apns set`). The key must be the `.p8`
    /// file's PEM text, a P-256 private key; IDs are Apple's 10-character team and key IDs.
    public func setAPNsCredentials(container: String, teamID: String, keyID: String, topic: String, privateKeyPEM: String)
        async throws
    {
        try Self.checkAppleID(teamID, "team ID")
        try Self.checkAppleID(keyID, "key ID")
        let bundleIDCharacters = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_".utf8)
        guard !topic.isEmpty, topic.utf8.count <= 255, topic.utf8.allSatisfy(bundleIDCharacters.contains) else {
            throw CloudKitError.badRequest("topic: expected the app's bundle ID, such as com.example.notes")
        }
        guard (try? P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)) != nil else {
            throw CloudKitError.badRequest(
                "key: not a P-256 private key in PEM form; use the .p8 file Apple's developer site gives for APNs")
        }
        try await requireContainer(container)
        let row = APNsCredentialsRow(
            container: container, teamID: teamID, keyID: keyID, topic: topic, privateKeyPEM: privateKeyPEM, updatedAt: now)
        try await storage.push.putAPNsCredentials(row)
    }

    public func apnsCredentials(container: String) async throws -> APNsCredentialsRow? {
        try await storage.push.apnsCredentials(container: container)
    }

    /// Whether the container had credentials to remove.
    public func removeAPNsCredentials(container: String) async throws -> Bool {
        try await storage.push.deleteAPNsCredentials(container: container)
    }

    private static func checkAppleID(_ value: String, _ name: String) throws(CloudKitError) {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
        guard value.utf8.count == 10, value.utf8.allSatisfy(allowed.contains) else {
            throw .badRequest("\(name): expected Apple's 10-character \(name), such as ABCDE12345; got '\(Names.escaped(value))'")
        }
    }
}
