import NimbusStorage
import NimbusWire

/// `tokens/create` and `tokens/register` (reference §11): where a user's pushes go.
extension NimbusService {
    /// How long a web-courier token is valid, in seconds (reference §14: `ttl=43200`).
    public static let webCourierLifetimeSeconds = 43_200

    /// `tokens/create`: a web-courier token for a client without APNs (a browser, CloudKit JS).
    /// Its pushes wait at `webcourierURL` for the client's long poll.
    public func createWebCourierToken(_ caller: Caller, body: ObjectReader, baseURL: String) async throws -> JSON {
        let owner = try notificationOwner(caller, for: "Push registration")
        let apnsEnvironment = try Self.apnsEnvironment(body)
        let token = Credentials.base64URL(Credentials.randomBytes(32))
        let row = PushTokenRow(owner: owner, token: token, apnsEnvironment: apnsEnvironment, isWebCourier: true, createdAt: now)
        try await storage.write { tx in try tx.putPushToken(row) }
        return [
            "apnsEnvironment": .string(apnsEnvironment), "apnsToken": .string(token),
            "webcourierURL": .string("\(baseURL)/webcourier/aps?tok=\(token)&ttl=\(Self.webCourierLifetimeSeconds)"),
        ]
    }

    /// `tokens/register`: binds a device's APNs token (64 hex digits, or the base64 of its 32
    /// bytes) or a web-courier token from `tokens/create` to the signed-in user.
    public func registerPushToken(_ caller: Caller, body: ObjectReader) async throws -> JSON {
        let owner = try notificationOwner(caller, for: "Push registration")
        let apnsEnvironment = try Self.apnsEnvironment(body)
        let given = try body.requiredString("apnsToken")
        let now = self.now
        let token: String = try await storage.write { tx in
            if let courier = try tx.pushToken(given), courier.isWebCourier {
                guard courier.owner == owner else {
                    throw CloudKitError(.accessDenied, "apnsToken: this web-courier token belongs to another user")
                }
                return given
            }
            guard let deviceToken = Self.apnsDeviceToken(given) else {
                throw CloudKitError.badRequest(
                    "apnsToken: expected an APNs device token (64 hexadecimal digits, or the base64 of its 32 bytes) or a token from tokens/create")
            }
            try tx.putPushToken(
                PushTokenRow(owner: owner, token: deviceToken, apnsEnvironment: apnsEnvironment, isWebCourier: false, createdAt: now))
            return deviceToken
        }
        return ["apnsEnvironment": .string(apnsEnvironment), "apnsToken": .string(token)]
    }

    private static func apnsEnvironment(_ body: ObjectReader) throws(CloudKitError) -> String {
        let value = try body.string("apnsEnvironment") ?? "production"
        guard value == "development" || value == "production" else {
            throw .badRequest("apnsEnvironment: '\(Names.escaped(value))' is not an APNs environment; use development or production")
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
}
