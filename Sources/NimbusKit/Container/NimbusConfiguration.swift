import Foundation

/// Where an app's containers live: the one thing a Nimbus app sets that a CloudKit app does not.
///
/// Set it in code (`CKContainer.defaultConfiguration = …`, or pass it to
/// `CKContainer(identifier:configuration:)`), or through the environment:
///
/// | variable | meaning | default |
/// |---|---|---|
/// | `NIMBUS_SERVER_URL` | the server's base URL | `http://127.0.0.1:8080` |
/// | `NIMBUS_API_TOKEN` | an API token (`nimbus tokens create`) | none: requests fail with `notAuthenticated` |
/// | `NIMBUS_ENVIRONMENT` | `development` or `production` | `development` |
/// | `NIMBUS_CONTAINER` | the default container's identifier | `iCloud.nimbus.default` |
/// | `NIMBUS_USERNAME`, `NIMBUS_PASSWORD` | sign in on first use | none (sign in with `CKContainer.signIn`) |
/// | `NIMBUS_DEVICE_ID` | this device's identifier | a random one per process |
public struct NimbusConfiguration: Sendable, Hashable {
    public enum Environment: String, Sendable, Hashable {
        case development, production
    }

    public var serverURL: URL
    public var apiToken: String
    public var environment: Environment
    public var containerIdentifier: String
    /// A user to sign in as when a request first needs one, and again when the session expires.
    public var username: String?
    public var password: String?
    /// A web auth token from an earlier sign-in the app kept, to skip signing in again.
    public var webAuthToken: String?
    /// Identifies this device to the server, so changes it makes carry its ID and (with
    /// subscriptions) its own changes do not notify it.
    public var deviceID: String
    /// Seconds before a request without an answer fails with `networkFailure`.
    public var requestTimeout: TimeInterval
    /// Where fetched assets' files are kept (one per checksum); nil: a folder per container
    /// in the temporary directory.
    public var assetCacheDirectory: URL? = nil
    /// Where the keys of `encryptedValues` are kept as files (`NimbusFileKeyStore`); nil: the
    /// keychain on Apple platforms, the user's application support folder elsewhere. Set
    /// `CKContainer.encryptionKeyStore` for another store.
    public var encryptionKeyDirectory: URL? = nil
    /// Where long-lived operations keep their journals (docs/sdk.md, "Operations"); nil: a folder
    /// per container in the user's application support folder.
    public var longLivedOperationDirectory: URL? = nil

    public init(
        serverURL: URL = URL(string: "http://127.0.0.1:8080")!, apiToken: String, environment: Environment = .development,
        containerIdentifier: String = NimbusConfiguration.defaultContainerIdentifier, username: String? = nil,
        password: String? = nil, webAuthToken: String? = nil, deviceID: String = UUID().uuidString,
        requestTimeout: TimeInterval = 60
    ) {
        self.serverURL = serverURL
        self.apiToken = apiToken
        self.environment = environment
        self.containerIdentifier = containerIdentifier
        self.username = username
        self.password = password
        self.webAuthToken = webAuthToken
        self.deviceID = deviceID
        self.requestTimeout = requestTimeout
    }

    public static let defaultContainerIdentifier = "iCloud.nimbus.default"

    /// The configuration the environment variables above describe.
    public static func fromEnvironment(_ variables: [String: String] = ProcessInfo.processInfo.environment)
        -> NimbusConfiguration
    {
        NimbusConfiguration(
            serverURL: variables["NIMBUS_SERVER_URL"].flatMap(URL.init(string:)) ?? URL(string: "http://127.0.0.1:8080")!,
            apiToken: variables["NIMBUS_API_TOKEN"] ?? "",
            environment: variables["NIMBUS_ENVIRONMENT"].flatMap(Environment.init(rawValue:)) ?? .development,
            containerIdentifier: variables["NIMBUS_CONTAINER"] ?? defaultContainerIdentifier,
            username: variables["NIMBUS_USERNAME"], password: variables["NIMBUS_PASSWORD"],
            deviceID: variables["NIMBUS_DEVICE_ID"] ?? UUID().uuidString)
    }
}
