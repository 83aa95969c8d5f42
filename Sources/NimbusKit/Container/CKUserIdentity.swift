import Foundation
import NimbusWire

/// A user as others see them: their record ID and name when they let themselves be
/// discovered, else only the lookup info that found (or failed to find) them.
public final class CKUserIdentity: NSObject, @unchecked Sendable {
    /// How a user is looked up: by email address, phone number or user record ID.
    public final class LookupInfo: NSObject, @unchecked Sendable {
        public let emailAddress: String?
        public let phoneNumber: String?
        public let userRecordID: CKRecord.ID?

        public init(emailAddress: String) {
            self.emailAddress = emailAddress
            phoneNumber = nil
            userRecordID = nil
        }

        public init(phoneNumber: String) {
            emailAddress = nil
            self.phoneNumber = phoneNumber
            userRecordID = nil
        }

        public init(userRecordID: CKRecord.ID) {
            emailAddress = nil
            phoneNumber = nil
            self.userRecordID = userRecordID
        }

        init(wire: UserLookupInfo) {
            emailAddress = wire.emailAddress
            phoneNumber = wire.phoneNumber
            userRecordID = wire.userRecordName.map { CKRecord.ID(recordName: $0) }
        }

        public static func lookupInfos(withEmails emails: [String]) -> [LookupInfo] { emails.map(LookupInfo.init(emailAddress:)) }
        public static func lookupInfos(withPhoneNumbers phoneNumbers: [String]) -> [LookupInfo] {
            phoneNumbers.map(LookupInfo.init(phoneNumber:))
        }
        public static func lookupInfos(with recordIDs: [CKRecord.ID]) -> [LookupInfo] { recordIDs.map(LookupInfo.init(userRecordID:)) }

        var wire: UserLookupInfo {
            UserLookupInfo(emailAddress: emailAddress, phoneNumber: phoneNumber, userRecordName: userRecordID?.recordName)
        }

        public override func isEqual(_ object: Any?) -> Bool {
            (object as? LookupInfo)?.wire == wire
        }

        public override var hash: Int { wire.hashValue }
    }

    public let userRecordID: CKRecord.ID?
    public let lookupInfo: LookupInfo?
    public let nameComponents: PersonNameComponents?
    /// Whether the identity is a user of this server (discovered), not only a lookup echoed back.
    public let hasiCloudAccount: Bool
    /// Contacts on the device that match; Nimbus has no address book, so always empty.
    public let contactIdentifiers: [String] = []

    init(wire: UserIdentity) {
        userRecordID = wire.userRecordName.map { CKRecord.ID(recordName: $0) }
        lookupInfo = wire.lookupInfo.map(LookupInfo.init(wire:))
        nameComponents = wire.nameComponents.map { names in
            var components = PersonNameComponents()
            components.namePrefix = names.namePrefix
            components.givenName = names.givenName
            components.middleName = names.middleName
            components.familyName = names.familyName
            components.nameSuffix = names.nameSuffix
            components.nickname = names.nickname
            return components
        }
        hasiCloudAccount = wire.userRecordName != nil
    }
}

extension CKContainer {
    /// What an app may ask of its user (CloudKit has one: being discoverable).
    public struct ApplicationPermissions: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static let userDiscoverability = ApplicationPermissions(rawValue: 1)
    }

    public enum ApplicationPermissionStatus: Int, Sendable {
        case initialState = 0
        case couldNotComplete = 1
        case denied = 2
        case granted = 3
    }

    public typealias ApplicationPermissionBlock = @Sendable (ApplicationPermissionStatus, (any Error)?) -> Void

    // MARK: Discoverability

    /// Asks for the permission: on Nimbus the signed-in user grants it by the app asking (the
    /// app shows its own prompt first), `users/discoverability` on the wire.
    public func requestApplicationPermission(_ permission: ApplicationPermissions) async throws -> ApplicationPermissionStatus {
        try await discoverability(permission, set: true)
    }

    public func requestApplicationPermission(
        _ permission: ApplicationPermissions, completionHandler: @escaping ApplicationPermissionBlock
    ) {
        callBack(completionHandler) { try await self.requestApplicationPermission(permission) }
    }

    /// Withdraws discoverability (Nimbus's addition: CloudKit leaves this to the Settings app).
    public func revokeApplicationPermission(_ permission: ApplicationPermissions) async throws -> ApplicationPermissionStatus {
        try await discoverability(permission, set: false)
    }

    public func applicationPermissionStatus(for permission: ApplicationPermissions) async throws -> ApplicationPermissionStatus {
        try await discoverability(permission, set: nil)
    }

    public func status(
        forApplicationPermission permission: ApplicationPermissions, completionHandler: @escaping ApplicationPermissionBlock
    ) {
        callBack(completionHandler) { try await self.applicationPermissionStatus(for: permission) }
    }

    private func discoverability(_ permission: ApplicationPermissions, set discoverable: Bool?) async throws(CKError)
        -> ApplicationPermissionStatus
    {
        guard permission == .userDiscoverability else {
            throw CKError(.invalidArguments, "the only application permission is .userDiscoverability")
        }
        let answer = try NimbusTransport.read(
            DiscoverabilityResponse.self,
            from: await transport.database(.public, "users/discoverability", DiscoverabilityRequest(discoverable: discoverable).json),
            endpoint: "users/discoverability")
        switch answer.status {
        case .initialState: return .initialState
        case .granted: return .granted
        case .denied: return .denied
        }
    }

    private func callBack(
        _ completionHandler: @escaping ApplicationPermissionBlock, _ body: @escaping @Sendable () async throws -> ApplicationPermissionStatus
    ) {
        Task {
            do {
                completionHandler(try await body(), nil)
            } catch {
                completionHandler(.couldNotComplete, error)
            }
        }
    }

    // MARK: Discovery

    /// The identity of a user who made themselves discoverable, or nil.
    public func userIdentity(forEmailAddress email: String) async throws -> CKUserIdentity? {
        try await discover(CKUserIdentity.LookupInfo(emailAddress: email))
    }

    public func userIdentity(forPhoneNumber phoneNumber: String) async throws -> CKUserIdentity? {
        try await discover(CKUserIdentity.LookupInfo(phoneNumber: phoneNumber))
    }

    public func userIdentity(forUserRecordID userRecordID: CKRecord.ID) async throws -> CKUserIdentity? {
        try await discover(CKUserIdentity.LookupInfo(userRecordID: userRecordID))
    }

    public func discoverUserIdentity(
        withEmailAddress email: String, completionHandler: @escaping @Sendable (CKUserIdentity?, (any Error)?) -> Void
    ) {
        identityCallBack(completionHandler) { try await self.userIdentity(forEmailAddress: email) }
    }

    public func discoverUserIdentity(
        withPhoneNumber phoneNumber: String, completionHandler: @escaping @Sendable (CKUserIdentity?, (any Error)?) -> Void
    ) {
        identityCallBack(completionHandler) { try await self.userIdentity(forPhoneNumber: phoneNumber) }
    }

    public func discoverUserIdentity(
        withUserRecordID userRecordID: CKRecord.ID, completionHandler: @escaping @Sendable (CKUserIdentity?, (any Error)?) -> Void
    ) {
        identityCallBack(completionHandler) { try await self.userIdentity(forUserRecordID: userRecordID) }
    }

    /// The users of the app who made themselves discoverable (CloudKit: those in the device's
    /// contacts; Nimbus has no address book, docs/identities.md).
    public func discoverAllIdentities() async throws -> [CKUserIdentity] {
        let answer = try NimbusTransport.read(
            UserIdentitiesResponse.self, from: await transport.database(.public, "users/discover", [:]), endpoint: "users/discover")
        return answer.users.map(CKUserIdentity.init(wire:))
    }

    public func discoverAllIdentities(completionHandler: @escaping @Sendable ([CKUserIdentity]?, (any Error)?) -> Void) {
        Task {
            do {
                completionHandler(try await discoverAllIdentities(), nil)
            } catch {
                completionHandler(nil, error)
            }
        }
    }

    private func discover(_ info: CKUserIdentity.LookupInfo) async throws -> CKUserIdentity? {
        let found = try await discoverIdentities([info])
        return found.first?.hasiCloudAccount == true ? found.first : nil
    }

    /// One identity per lookup, in order (`users/discover`, in requests of at most 200).
    func discoverIdentities(_ infos: [CKUserIdentity.LookupInfo]) async throws(CKError) -> [CKUserIdentity] {
        var identities: [CKUserIdentity] = []
        for chunk in chunked(infos, size: Limits.operationsPerRequest.value) {
            let answer = try NimbusTransport.read(
                UserIdentitiesResponse.self,
                from: await transport.database(.public, "users/discover", DiscoverUsersRequest(lookupInfos: chunk.map(\.wire)).json),
                endpoint: "users/discover")
            identities += answer.users.map(CKUserIdentity.init(wire:))
        }
        return identities
    }

    private func identityCallBack(
        _ completionHandler: @escaping @Sendable (CKUserIdentity?, (any Error)?) -> Void,
        _ body: @escaping @Sendable () async throws -> CKUserIdentity?
    ) {
        Task {
            do {
                completionHandler(try await body(), nil)
            } catch {
                completionHandler(nil, error)
            }
        }
    }
}

/// Finds the identities of users by email address, phone number or record ID; only those who
/// made themselves discoverable are reported.
open class CKDiscoverUserIdentitiesOperation: CKContainerOperation, @unchecked Sendable {
    public var userIdentityLookupInfos: [CKUserIdentity.LookupInfo] = []
    public var userIdentityDiscoveredBlock: (@Sendable (CKUserIdentity, CKUserIdentity.LookupInfo) -> Void)?
    public var discoverUserIdentitiesResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    public var discoverUserIdentitiesCompletionBlock: (@Sendable ((any Error)?) -> Void)?

    public override init() { super.init() }

    public convenience init(userIdentityLookupInfos: [CKUserIdentity.LookupInfo]) {
        self.init()
        self.userIdentityLookupInfos = userIdentityLookupInfos
    }

    override func run() async throws {
        let container = self.container ?? resolvedContainer(database: nil)
        let identities = try await container.discoverIdentities(userIdentityLookupInfos)
        for (info, identity) in zip(userIdentityLookupInfos, identities) where identity.hasiCloudAccount {
            userIdentityDiscoveredBlock?(identity, info)
        }
    }

    override func finish(with error: CKError?) {
        discoverUserIdentitiesResultBlock?(error.map { .failure($0) } ?? .success(()))
        discoverUserIdentitiesCompletionBlock?(error)
    }
}

/// Finds every user of the app who made themselves discoverable.
open class CKDiscoverAllUserIdentitiesOperation: CKContainerOperation, @unchecked Sendable {
    public var userIdentityDiscoveredBlock: (@Sendable (CKUserIdentity) -> Void)?
    public var discoverAllUserIdentitiesResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    public var discoverAllUserIdentitiesCompletionBlock: (@Sendable ((any Error)?) -> Void)?

    public override init() { super.init() }

    override func run() async throws {
        let container = self.container ?? resolvedContainer(database: nil)
        for identity in try await container.discoverAllIdentities() { userIdentityDiscoveredBlock?(identity) }
    }

    override func finish(with error: CKError?) {
        discoverAllUserIdentitiesResultBlock?(error.map { .failure($0) } ?? .success(()))
        discoverAllUserIdentitiesCompletionBlock?(error)
    }
}
