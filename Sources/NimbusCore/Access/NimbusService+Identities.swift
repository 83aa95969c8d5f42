import Foundation
import NimbusStorage
import NimbusWire

/// Users as people (docs/identities.md): profiles, each user's record in a container's public
/// database, identities, and discovery of the users who let themselves be found.
extension NimbusService {
    // MARK: Profiles

    /// A profile as stored: the email address trimmed and lowercased, the phone number as `+`
    /// and digits, empty name parts dropped; or why it cannot be stored.
    static func normalized(_ profile: UserProfile) throws(CloudKitError) -> UserProfile {
        var normalized = profile
        normalized.emailAddress = try profile.emailAddress.flatMap(normalizedEmail)
        normalized.phoneNumber = try profile.phoneNumber.flatMap(normalizedPhone)
        for part in [profile.nameComponents.givenName, profile.nameComponents.familyName, profile.nameComponents.nickname,
                     profile.nameComponents.middleName, profile.nameComponents.namePrefix, profile.nameComponents.nameSuffix]
        where (part?.utf8.count ?? 0) > 256 {
            throw .badRequest("a part of a name may be at most 256 bytes long")
        }
        return normalized
    }

    /// `name@host.domain`, lowercased; nil for an empty text.
    static func normalizedEmail(_ text: String) throws(CloudKitError) -> String? {
        let email = text.trimmingCharacters(in: .whitespaces).lowercased()
        if email.isEmpty { return nil }
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."),
            email.utf8.count <= 254, !email.contains(where: { $0.isWhitespace })
        else {
            throw .badRequest("'\(Names.escaped(text))' is not an email address like ann@example.com")
        }
        return email
    }

    /// `+` and 7 to 15 digits (E.164); spaces, dashes, dots and parentheses are dropped. Nil for
    /// an empty text.
    static func normalizedPhone(_ text: String) throws(CloudKitError) -> String? {
        let kept = text.filter { !" -.()".contains($0) }
        if kept.isEmpty { return nil }
        let digits = kept.hasPrefix("+") ? kept.dropFirst() : Substring(kept)
        guard (7...15).contains(digits.count), digits.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw .badRequest(
                "'\(Names.escaped(text))' is not a phone number; write it with its country code, like +1 555 010 0199")
        }
        return "+" + digits
    }

    // MARK: Membership and the user record

    /// Notes that the user has used the container (discovery finds only members) and makes
    /// their record in the environment's public database if it is not there yet.
    func joinContainer(container: String, environment: Environment, user: UserRow, recordName: String, at time: Int64)
        async throws
    {
        try await accounts.join(
            ContainerMember(container: container, userID: user.id, userRecordName: recordName, discoverable: nil, joinedAt: time))
        try await ensureUserRecord(container: container, environment: environment, userID: user.id, userName: user.name, recordName: recordName)
    }

    /// Makes a user's record in the environment's public database if it is not there: on
    /// joining, and again after the development environment is reset.
    func ensureUserRecord(container: String, environment: Environment, userID: Int64, userName: String, recordName: String)
        async throws
    {
        let caller = Caller(
            container: container, environment: environment,
            user: Caller.User(id: userID, name: userName, recordName: recordName, webAuthToken: ""),
            deviceID: Names.anonymousDevice)
        let target = DatabaseTarget(caller: caller, scope: .public)
        let name: JSON = [WireKey.recordName: .string(recordName)]
        let found = try await lookupRecords(target, RecordsLookupRequest(body: [WireKey.records: [name]]))
        guard case .failure(let error)? = found.records.first, error.code == .notFound else { return }
        // Saved as the user, so its creator (who alone may change it) is the user. A sign-in
        // beside this one may have made it first: EXISTS then, and nothing to do.
        _ = try await modifyRecords(
            target,
            RecordsModifyRequest(body: [
                WireKey.operations: [
                    [
                        WireKey.operationType: "create",
                        WireKey.record: [WireKey.recordName: .string(recordName), WireKey.recordType: .string(Names.usersRecordType)],
                    ]
                ]
            ]))
    }

    /// Who may write a user record (type Users, named by a user record name): the user it
    /// belongs to, never to delete it; and a user record name names nothing else, so no one can
    /// take a user's name before their record is made. The administrator (a server-to-server
    /// key) is not asked.
    static func checkUserRecordWrite(_ recordName: String, recordType: String?, deleting: Bool, caller: Caller) throws(CloudKitError) {
        if let recordType, recordType != Names.usersRecordType {
            throw CloudKitError(
                .badRequest,
                "'\(recordName)' is a user record name ('_' and 32 hex digits): it names a record of type Users, not '\(recordType)'",
                recordName: recordName)
        }
        if deleting {
            throw CloudKitError(
                .accessDenied, "user record '\(recordName)' lasts as long as its account; clear its fields instead of deleting it",
                recordName: recordName)
        }
        guard caller.user?.recordName == recordName else {
            throw CloudKitError(
                .accessDenied,
                "records of type Users are the users' own: each user may save only the one named by their user record name (users/caller)",
                recordName: recordName)
        }
    }

    /// A query of the Users type is answered only on fields the schema grants QUERYABLE
    /// (none are until the developer grants them), so the user directory cannot be listed.
    static func checkUserDirectoryQuery(_ request: RecordsQueryRequest, schema: SchemaMap) throws(CloudKitError) {
        let queryable = SchemaFieldRow.Indexes.queryable
        guard let first = request.filters.first else {
            throw CloudKitError.badRequest(
                "query.filterBy: a query of Users needs a filter on a field with a QUERYABLE index; grant one with `nimbus schema index --record-type Users --field NAME --set queryable`")
        }
        for filter in [first] + request.filters.dropFirst() {
            let field = filter.fieldName ?? ""
            guard (schema[field]?.indexes ?? 0) & queryable != 0 else {
                throw CloudKitError.badRequest(
                    "\(filter.path): field '\(field)' of Users has no QUERYABLE index; user records are not queryable unless you grant one (`nimbus schema index --record-type Users --field \(field) --set queryable`)")
            }
        }
    }

    // MARK: users/caller, users/current

    /// The caller's identity: their record name, lookup info and name (their own, so all of it).
    public func callerIdentity(_ caller: Caller) async throws -> UserIdentity {
        if let key = caller.serverKey {
            return UserIdentity(userRecordName: key.recordName, lookupInfo: UserLookupInfo(userRecordName: key.recordName))
        }
        let user = try caller.requireUser(for: "users/caller")
        let profile = try await accounts.profile(userID: user.id) ?? UserProfile()
        return UserIdentity(
            userRecordName: user.recordName,
            lookupInfo: UserLookupInfo(
                emailAddress: profile.emailAddress, phoneNumber: profile.phoneNumber, userRecordName: user.recordName),
            nameComponents: profile.nameComponents.isEmpty ? NameComponents(nickname: user.name) : profile.nameComponents)
    }

    /// `users/current`: the record name, and the name when the caller is discoverable.
    public func currentUser(_ caller: Caller) async throws -> LegacyUser {
        let user = try caller.requireUser(for: "users/current")
        guard try await discoverabilityStatus(caller) == .granted, let profile = try await accounts.profile(userID: user.id) else {
            return LegacyUser(userRecordName: user.recordName)
        }
        return LegacyUser(
            userRecordName: user.recordName, firstName: profile.nameComponents.givenName,
            lastName: profile.nameComponents.familyName)
    }

    // MARK: Discoverability

    /// The caller's discoverability in the container, after setting it when `discoverable` is
    /// given. `denied` whatever the user chose while the container has discovery turned off.
    public func discoverability(_ caller: Caller, set discoverable: Bool?) async throws -> DiscoverabilityStatus {
        let user = try caller.requireUser(for: "Discoverability")
        if let discoverable {
            if try await !accounts.setDiscoverable(container: caller.container, userID: user.id, discoverable) {
                // Members are made at sign-in; a session from before memberships existed joins now.
                try await accounts.join(
                    ContainerMember(
                        container: caller.container, userID: user.id, userRecordName: user.recordName,
                        discoverable: discoverable, joinedAt: now))
            }
        }
        return try await discoverabilityStatus(caller)
    }

    private func discoverabilityStatus(_ caller: Caller) async throws -> DiscoverabilityStatus {
        let user = try caller.requireUser(for: "Discoverability")
        guard try await accounts.containerSettings(container: caller.container).userDiscovery else { return .denied }
        switch try await accounts.member(container: caller.container, userID: user.id)?.discoverable {
        case true?: return .granted
        case false?: return .denied
        case nil: return .initialState
        }
    }

    /// Turns discovery on or off for a whole container (on unless turned off).
    public func setUserDiscovery(container: String, enabled: Bool) async throws {
        try await changeSettings(container: container) { $0.userDiscovery = enabled }
    }

    /// Turns self-service sign-up on or off for a container (off unless turned on).
    public func setSignUp(container: String, enabled: Bool) async throws {
        try await changeSettings(container: container) { $0.signUp = enabled }
    }

    func changeSettings(container: String, _ change: (inout ContainerSettings) -> Void) async throws {
        var settings = try await accounts.containerSettings(container: container)
        change(&settings)
        guard try await accounts.setContainerSettings(container: container, settings) else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' does not exist")
        }
        settingsCache.clear()
    }

    // MARK: Discovery

    /// Who may look users up: a signed-in user or a server-to-server key.
    private func requireDiscoverer(_ caller: Caller, for what: String) throws(CloudKitError) {
        if caller.serverKey == nil { _ = try caller.requireUser(for: what) }
    }

    /// The members the lookups find who let themselves be discovered, by lookup; nobody while
    /// the container has discovery turned off.
    private func discoverable(_ lookups: [UserLookupInfo], container: String) async throws -> [UserLookupInfo: DirectoryEntry] {
        guard try await accounts.containerSettings(container: container).userDiscovery else { return [:] }
        let keys = lookups.map { ($0, Self.lookupKeys($0)) }
        let entries = try await accounts.directory(container: container, lookups: Array(Set(keys.flatMap(\.1))))
            .filter { $0.member.discoverable == true }
        var found: [UserLookupInfo: DirectoryEntry] = [:]
        for (info, keys) in keys {
            if let entry = entries.first(where: { entry in keys.contains { entry.matches($0) } }) { found[info] = entry }
        }
        return found
    }

    /// What a lookup names, each normalized as profiles store it (an address that does not
    /// normalize finds nobody).
    static func lookupKeys(_ info: UserLookupInfo) -> [UserLookup] {
        var keys: [UserLookup] = []
        if let email = info.emailAddress, let normalized = try? normalizedEmail(email) { keys.append(.email(normalized)) }
        if let phone = info.phoneNumber, let normalized = try? normalizedPhone(phone) { keys.append(.phone(normalized)) }
        if let name = info.userRecordName { keys.append(.recordName(name)) }
        return keys
    }

    /// `users/lookup/participants` (Nimbus's wire form of `CKFetchShareParticipantsOperation`
    /// and `CKContainer.shareParticipant(for…)`): the member of the container each lookup names,
    /// in request order, for a share invitation. A member comes back with their record name,
    /// and their name when they let themselves be discovered; a lookup that finds nobody is
    /// `NOT_FOUND`, one that finds two people `BAD_REQUEST`. Unlike `users/discover`, this tells
    /// a signed-in user whether an address has an account in the app, as CloudKit's participant
    /// lookup does; the caller's request budget bounds how fast anyone can ask.
    public func lookUpParticipants(_ caller: Caller, _ request: DiscoverUsersRequest) async throws -> ParticipantLookupResponse {
        _ = try caller.requireUser(for: "Looking up share participants")
        let keys = request.lookupInfos.map { ($0, Self.lookupKeys($0)) }
        let entries = try await accounts.directory(container: caller.container, lookups: Array(Set(keys.flatMap(\.1))))
        let discovery = try await accounts.containerSettings(container: caller.container).userDiscovery
        return ParticipantLookupResponse(
            users: keys.enumerated().map { index, lookup -> ItemResult<UserIdentity> in
                let (info, keys) = lookup
                let path = "lookupInfos[\(index)]"
                guard !keys.isEmpty else {
                    let said = Self.describe(info)
                    return .failure(
                        .badRequest(
                            said.isEmpty
                                ? "\(path): say who with an emailAddress, a phoneNumber or a userRecordName"
                                : "\(path): \(said) is not an address Nimbus can read"))
                }
                let found = entries.filter { entry in keys.contains { entry.matches($0) } }
                let people = Set(found.map(\.member.userRecordName))
                guard let entry = found.first else {
                    return .failure(CloudKitError(.notFound, "\(path): no user of this app has \(Self.describe(info))"))
                }
                guard people.count == 1 else {
                    return .failure(.badRequest("\(path): \(Self.describe(info)) names \(people.count) different users; look up one of them"))
                }
                var lookupInfo = info
                lookupInfo.userRecordName = entry.member.userRecordName
                let named = discovery && entry.member.discoverable == true
                return .success(
                    UserIdentity(
                        userRecordName: entry.member.userRecordName, lookupInfo: lookupInfo,
                        nameComponents: named ? entry.profile.nameComponents : nil))
            })
    }

    /// A lookup as a reason says it: the address or record name asked about.
    private static func describe(_ info: UserLookupInfo) -> String {
        [info.emailAddress.map { "the email address \(Names.escaped($0))" }, info.phoneNumber.map { "the phone number \(Names.escaped($0))" },
         info.userRecordName.map { "the record name \(Names.escaped($0))" }]
            .compactMap { $0 }.joined(separator: " or ")
    }

    /// `users/lookup/contacts` (CloudKit JS v1's `discoverAllContactUserInfos`): the users who
    /// let themselves be discovered, as `users/discover` without lookups lists them (Nimbus has
    /// no address book), in the legacy user form.
    public func lookUpContacts(_ caller: Caller) async throws -> LegacyUsersResponse {
        let identities = try await discoverAllUsers(caller)
        return LegacyUsersResponse(
            users: identities.users.map {
                LegacyUser(
                    userRecordName: $0.userRecordName ?? "", firstName: $0.nameComponents?.givenName,
                    lastName: $0.nameComponents?.familyName)
            })
    }

    /// `users/discover` (POST): an identity per lookup, in order. A discoverable member comes
    /// back whole; for anyone else (unknown, not a member, not discoverable) only the lookup
    /// info asked about, so the answer tells nothing of who has an account.
    public func discoverUsers(_ caller: Caller, _ request: DiscoverUsersRequest) async throws -> UserIdentitiesResponse {
        try requireDiscoverer(caller, for: "users/discover")
        let found = try await discoverable(request.lookupInfos, container: caller.container)
        return UserIdentitiesResponse(
            users: request.lookupInfos.map { info in
                guard let entry = found[info] else { return UserIdentity(lookupInfo: info) }
                var lookupInfo = info
                lookupInfo.userRecordName = entry.member.userRecordName
                return UserIdentity(
                    userRecordName: entry.member.userRecordName, lookupInfo: lookupInfo,
                    nameComponents: entry.profile.nameComponents)
            })
    }

    /// `users/discover` (GET): the members who made themselves discoverable, the first
    /// `Limits.resultsPerPage` of them (Nimbus has no address book to narrow them by).
    public func discoverAllUsers(_ caller: Caller) async throws -> UserIdentitiesResponse {
        try requireDiscoverer(caller, for: "users/discover")
        guard try await accounts.containerSettings(container: caller.container).userDiscovery else { return UserIdentitiesResponse(users: []) }
        let entries = try await accounts.discoverableMembers(container: caller.container, limit: Limits.resultsPerPage.value)
        return UserIdentitiesResponse(
            users: entries.map { entry in
                UserIdentity(
                    userRecordName: entry.member.userRecordName,
                    lookupInfo: UserLookupInfo(userRecordName: entry.member.userRecordName),
                    nameComponents: entry.profile.nameComponents)
            })
    }

    /// `users/lookup/email` and `users/lookup/id` (deprecated forms): the discoverable users
    /// found, in request order; the others are left out.
    public func lookUpUsers(_ caller: Caller, _ request: LegacyLookupRequest, byEmail: Bool) async throws -> LegacyUsersResponse {
        try requireDiscoverer(caller, for: byEmail ? "users/lookup/email" : "users/lookup/id")
        for (index, info) in request.users.enumerated() where (byEmail ? info.emailAddress : info.userRecordName) == nil {
            throw CloudKitError.badRequest(
                "missing required key 'users[\(index)].\(byEmail ? WireKey.emailAddress : WireKey.userRecordName)'")
        }
        let infos = request.users.map {
            byEmail ? UserLookupInfo(emailAddress: $0.emailAddress) : UserLookupInfo(userRecordName: $0.userRecordName)
        }
        let found = try await discoverable(infos, container: caller.container)
        return LegacyUsersResponse(
            users: infos.compactMap { info in
                found[info].map { entry in
                    LegacyUser(
                        userRecordName: entry.member.userRecordName, firstName: entry.profile.nameComponents.givenName,
                        lastName: entry.profile.nameComponents.familyName,
                        emailAddress: byEmail ? entry.profile.emailAddress : nil)
                }
            })
    }
}
