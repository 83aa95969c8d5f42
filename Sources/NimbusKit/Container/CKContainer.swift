import Foundation
import NimbusWire

/// Whether the device has a user to act as. In Nimbus the "iCloud account" is a user signed in
/// to the container's server.
public enum CKAccountStatus: Int, Sendable {
    case couldNotDetermine = 0
    case available = 1
    case restricted = 2
    case noAccount = 3
    case temporarilyUnavailable = 4
}

/// A container: an app's slice of a Nimbus server, with a public database, the signed-in
/// user's private database and the shared database.
public final class CKContainer: NSObject, @unchecked Sendable {
    public let containerIdentifier: String?
    let transport: NimbusTransport

    public private(set) lazy var publicCloudDatabase = CKDatabase(container: self, scope: .public)
    public private(set) lazy var privateCloudDatabase = CKDatabase(container: self, scope: .private)
    public private(set) lazy var sharedCloudDatabase = CKDatabase(container: self, scope: .shared)

    private static let registryLock = NSLock()
    nonisolated(unsafe) private static var _defaultConfiguration: NimbusConfiguration?
    nonisolated(unsafe) private static var containers: [String: CKContainer] = [:]

    /// The configuration `default()` and `init(identifier:)` use: set it before the first
    /// container is made, or leave it nil to read the environment (see `NimbusConfiguration`).
    public static var defaultConfiguration: NimbusConfiguration? {
        get { registryLock.withLock { _defaultConfiguration } }
        set {
            registryLock.withLock {
                _defaultConfiguration = newValue
                containers = [:]
            }
        }
    }

    /// The app's default container (one instance per identifier, as CloudKit hands out).
    public static func `default`() -> CKContainer {
        let configuration = registryLock.withLock { _defaultConfiguration } ?? .fromEnvironment()
        return shared(configuration)
    }

    /// The container with this identifier, on the default configuration's server.
    public convenience init(identifier: String) {
        var configuration = CKContainer.registryLock.withLock { CKContainer._defaultConfiguration } ?? .fromEnvironment()
        configuration.containerIdentifier = identifier
        self.init(configuration: configuration)
    }

    /// A container on any server: Nimbus's way to point an app at its server in code.
    public init(configuration: NimbusConfiguration) {
        containerIdentifier = configuration.containerIdentifier
        transport = NimbusTransport(configuration: configuration)
        longLivedOperations = LongLivedOperations(
            directory: configuration.longLivedOperationDirectory
                ?? LongLivedOperations.defaultDirectory(containerIdentifier: configuration.containerIdentifier))
        fieldCiphers = FieldCiphers(containerIdentifier: configuration.containerIdentifier, store: Self.defaultKeyStore(configuration))
        keyMailbox = KeyMailbox(transport: transport, ciphers: fieldCiphers)
        operationQueue.name = "NimbusKit.container"
        operationQueue.maxConcurrentOperationCount = 4
        super.init()
        // The container is the notification's object, so an app with several can tell them
        // apart; observers of any object hear it too.
        transport.onAccountChange { [weak self] in NotificationCenter.default.post(name: .CKAccountChanged, object: self) }
    }

    /// The keychain on Apple platforms, owner-only files elsewhere (and wherever the
    /// configuration names a folder for them).
    private static func defaultKeyStore(_ configuration: NimbusConfiguration) -> any NimbusEncryptionKeyStore {
        #if canImport(Security)
        if configuration.encryptionKeyDirectory == nil { return NimbusKeychainKeyStore() }
        #endif
        return NimbusFileKeyStore(directory: configuration.encryptionKeyDirectory ?? NimbusFileKeyStore.defaultDirectory)
    }

    /// Journals of long-lived operations (docs/sdk.md, "Operations").
    let longLivedOperations: LongLivedOperations

    /// The IDs of long-lived operations that have not finished: running in this process, or
    /// left unfinished by an earlier launch.
    public func fetchAllLongLivedOperationIDs(completionHandler: @escaping @Sendable ([CKOperation.ID]?, (any Error)?) -> Void) {
        do {
            completionHandler(try longLivedOperations.ids(), nil)
        } catch {
            completionHandler(nil, error)
        }
    }

    public func allLongLivedOperationIDs() async throws -> [CKOperation.ID] {
        try longLivedOperations.ids()
    }

    /// A long-lived operation rebuilt from its journal, with its ID, records and configuration:
    /// set its callbacks and add it; it sends its requests again and the server answers those
    /// it already applied from their outcomes. Nil when it finished (or never was).
    public func fetchLongLivedOperation(
        withID operationID: CKOperation.ID, completionHandler: @escaping @Sendable (CKOperation?, (any Error)?) -> Void
    ) {
        do {
            completionHandler(try longLivedOperation(operationID), nil)
        } catch {
            completionHandler(nil, error)
        }
    }

    public func longLivedOperation(for operationID: CKOperation.ID) async throws -> CKOperation? {
        try longLivedOperation(operationID)
    }

    private func longLivedOperation(_ operationID: CKOperation.ID) throws(CKError) -> CKOperation? {
        guard let journal = try longLivedOperations.journal(operationID) else { return nil }
        return try LongLivedJournal.operation(from: journal, container: self)
    }

    /// The keys of `encryptedValues`, per signed-in user (docs/encryption.md).
    let fieldCiphers: FieldCiphers
    /// How those keys reach the user's other devices and share participants.
    let keyMailbox: KeyMailbox

    /// Where this container's encryption keys are kept: files readable by their owner only,
    /// unless the app sets its own store.
    public var encryptionKeyStore: any NimbusEncryptionKeyStore {
        get { fieldCiphers.store }
        set { fieldCiphers.store = newValue }
    }

    /// The signed-in user's encryption key as text, to carry to their other devices
    /// (`importEncryptionKey(_:)` there). Makes the key if this device has none. Whoever holds
    /// the text reads the user's encrypted values: hand it over as you would a password.
    public func exportEncryptionKey() async throws -> String {
        try fieldCiphers.export(user: try await signedInUser())
    }

    /// Keeps a key exported on the user's other device, so this one reads (and writes) the
    /// same encrypted values. Refuses a key of another container or user.
    public func importEncryptionKey(_ exported: String) async throws {
        try fieldCiphers.importKey(exported, user: try await signedInUser())
    }

    /// The cipher of a zone's encrypted values: in the user's own zones from the user's key
    /// (which `create` makes when none of the user's devices holds one, and which otherwise
    /// comes sealed from the device that does), in a zone shared with the user from the key
    /// its share's URL brought.
    func fieldCipher(zone: CKRecordZone.ID, create: Bool) async throws(CKError) -> FieldCipher {
        let user = try await signedInUser()
        if zone.ownerName == CKCurrentUserDefaultName || zone.ownerName == user {
            if !fieldCiphers.holdsUserKey(user: user) { _ = try await keyMailbox.obtainUserKey(user: user, create: create) }
        } else if fieldCiphers.sharedZoneKey(user: user, zone: FieldCiphers.zoneName(zone)) == nil {
            try? await keyMailbox.shareWithOtherDevices(user: user)
        }
        return try fieldCiphers.cipher(zone: zone, user: user, create: create)
    }

    private func signedInUser() async throws(CKError) -> String {
        if let known = transport.userRecordName { return known }
        return try await fetchCaller()
    }

    /// Runs container operations (the notification collection, the badge).
    private let operationQueue = OperationQueue()

    /// Runs an operation against this container; a database operation runs on its
    /// database, or on the private database when it names none.
    public func add(_ operation: CKOperation) {
        switch operation {
        case let operation as CKDatabaseOperation:
            (operation.database ?? privateCloudDatabase).add(operation)
        case let operation as CKContainerOperation:
            operation.container = self
            operationQueue.addOperation(operation)
        default:
            operationQueue.addOperation(operation)
        }
    }

    private static func shared(_ configuration: NimbusConfiguration) -> CKContainer {
        registryLock.withLock {
            if let container = containers[configuration.containerIdentifier],
                container.transport.configuration == configuration
            {
                return container
            }
            let container = CKContainer(configuration: configuration)
            containers[configuration.containerIdentifier] = container
            return container
        }
    }

    public func database(with scope: CKDatabase.Scope) -> CKDatabase {
        switch scope {
        case .public: return publicCloudDatabase
        case .private: return privateCloudDatabase
        case .shared: return sharedCloudDatabase
        }
    }

    // MARK: Accounts

    /// Signs a user in (Nimbus's counterpart of the device's iCloud account) and keeps the
    /// session for every database of this container. Returns the user's record ID.
    @discardableResult
    public func signIn(username: String, password: String) async throws -> CKRecord.ID {
        let name = try await transport.signIn(username: username, password: password)
        return CKRecord.ID(recordName: name)
    }

    /// Ends the session on the server.
    public func signOut() async throws {
        try await transport.signOut()
    }

    /// The web auth token of the current session, for an app that keeps it across launches
    /// (pass it back in `NimbusConfiguration.webAuthToken`).
    public var webAuthToken: String? { transport.webAuthToken }

    public func accountStatus(completionHandler: @escaping @Sendable (CKAccountStatus, (any Error)?) -> Void) {
        Task {
            do {
                completionHandler(try await accountStatus(), nil)
            } catch {
                completionHandler(.couldNotDetermine, error)
            }
        }
    }

    /// `.available` with a live session, `.noAccount` without one; network failures throw.
    public func accountStatus() async throws -> CKAccountStatus {
        do {
            _ = try await fetchCaller()
            return .available
        } catch {
            guard error.code == .notAuthenticated else { throw error }
            return .noAccount
        }
    }

    public func fetchUserRecordID(completionHandler: @escaping @Sendable (CKRecord.ID?, (any Error)?) -> Void) {
        Task {
            do {
                completionHandler(try await userRecordID(), nil)
            } catch {
                completionHandler(nil, error)
            }
        }
    }

    /// The signed-in user's record ID: stable, and scoped to this container.
    public func userRecordID() async throws -> CKRecord.ID {
        CKRecord.ID(recordName: try await fetchCaller())
    }

    private func fetchCaller() async throws(CKError) -> String {
        let answer = try NimbusTransport.read(
            CallerIdentityResponse.self, from: await transport.database(.public, "users/caller", [:]), endpoint: "users/caller")
        transport.rememberUserRecordName(answer.userRecordName)
        return answer.userRecordName
    }
}

extension Notification.Name {
    /// Posted when a container's signed-in user changes (a sign-in as another user, or a
    /// sign-out), with the container as its object. CloudKit posts it when the device's iCloud
    /// account changes.
    public static let CKAccountChanged = Notification.Name("CKAccountChangedNotification")
}
