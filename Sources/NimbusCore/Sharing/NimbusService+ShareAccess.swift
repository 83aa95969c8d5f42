import Crypto
import NimbusStorage
import NimbusWire

/// Reaching a share by its short GUID (docs/sharing.md): `records/resolve` shows what a URL
/// leads to, `records/accept` takes the caller in. The registry (`ShareStore`) says where a
/// GUID's share is; the share record says who may see it.
extension NimbusService {
    /// One result per short GUID, in order: what it leads to, or why not.
    public func resolveShares(_ target: DatabaseTarget, _ request: ShortGUIDsRequest, accepting: Bool) async throws
        -> ShareInfosResponse
    {
        let endpoint = accepting ? "records/accept" : "records/resolve"
        guard target.scope == .public else {
            throw CloudKitError.badRequest("\(endpoint) is served on the public database: POST …/public/\(endpoint)")
        }
        let user = try target.caller.requireUser(for: accepting ? "Accepting a share" : "Resolving a share")
        let me = try await accounts.directory(container: target.caller.container, lookups: [.recordName(user.recordName)]).first
        var results: [ItemResult<ShareInfo>] = []
        for entry in request.shortGUIDs {
            do {
                results.append(.success(try await shareInfo(entry, target: target, user: user, profile: me?.profile, accepting: accepting)))
            } catch let error as CloudKitError {
                results.append(.failure(error))
            }
        }
        return ShareInfosResponse(results: results)
    }

    /// The caller's place in a share: the participant they are, or would be when they accept.
    private struct Place {
        var participant: ShareParticipant
        /// Whether they join as a public participant (not invited, the share is public).
        var joinsPublicly: Bool
    }

    private func shareInfo(
        _ entry: ShortGUIDsRequest.Entry, target: DatabaseTarget, user: Caller.User, profile: UserProfile?, accepting: Bool
    ) async throws -> ShareInfo {
        let unknown = CloudKitError(.notFound, "no share has the short GUID '\(Names.escaped(entry.value))'")
        guard let location = try await storage.shares.shareLocation(shortGUID: entry.value),
            location.container == target.caller.container, location.environment == target.caller.environment
        else { throw unknown }
        let place: Place
        var state: ShareState
        (state, place) = try await share(at: location, shortGUID: entry.value, for: user, profile: profile) ?? { throw unknown }()
        if accepting, place.participant.acceptanceStatus != .accepted {
            try await storage.shares.addMember(user.recordName, to: location)
            state = try await accept(place, at: location, shortGUID: entry.value, user: user, profile: profile, target: target)
        }
        let owner = location.ownerRecordName == user.recordName
        let view = target.viewingZones(of: location.ownerRecordName)
        let rootName = state.rootRecordName
        let (zone, shareRow, root) = try await storage.read(in: location.databaseKey) { tx -> (ZoneRow, RecordRow, RecordRow?) in
            guard let found = try Self.shareRows(at: location, tx: tx) else { throw unknown }
            let root = try rootName.flatMap { try tx.record(zoneID: found.zone.id, name: $0) }.flatMap { $0.isDeleted ? nil : $0 }
            return (found.zone, found.share, root)
        }
        guard let participant = state.participant(userRecordName: user.recordName) ?? (accepting ? nil : place.participant) else {
            throw unknown
        }
        return ShareInfo(
            shortGUID: entry.value, containerIdentifier: location.container, environment: location.environment.rawValue,
            databaseScope: owner ? "PRIVATE" : "SHARED", zoneID: wireZoneID(name: location.zoneName, owner: location.ownerRecordName),
            rootRecordName: state.rootRecordName,
            rootRecord: try entry.shouldFetchRootRecord
                ? root.map {
                    try recordOutput($0, zone: zone, target: view, desiredKeys: entry.rootRecordDesiredKeys, numbersAsStrings: false)
                } : nil,
            share: try recordOutput(shareRow, zone: zone, target: view, desiredKeys: nil, numbersAsStrings: false),
            ownerIdentity: state.owner?.userIdentity ?? UserIdentity(userRecordName: location.ownerRecordName),
            participantPermission: participant.permission ?? .readOnly, participantStatus: participant.acceptanceStatus ?? .invited,
            participantType: participant.type ?? .user, webpageURL: target.assetBaseURL.map { "\($0)/share/\(entry.value)" })
    }

    /// The share record at `location` when it still has the GUID, with the caller's place in
    /// it; nil when there is no such share. A caller with no place is refused.
    private func share(at location: ShareLocation, shortGUID: String, for user: Caller.User, profile: UserProfile?) async throws
        -> (ShareState, Place)?
    {
        let found = try await storage.read(in: location.databaseKey) { tx -> RecordRow? in try Self.shareRows(at: location, tx: tx)?.share }
        guard let row = found, let state = try ShareState(fields: RecordCodec.decode(row.fields)), state.shortGUID == shortGUID
        else { return nil }
        if let participant = state.participant(userRecordName: user.recordName) ?? Self.invitation(in: state, for: profile) {
            return (state, Place(participant: participant, joinsPublicly: false))
        }
        guard state.publicPermission == .readOnly || state.publicPermission == .readWrite else {
            throw CloudKitError(
                .accessDenied, "you are not invited to this share; ask its owner to invite you, or to open it to anyone with the link")
        }
        let identity = UserIdentity(
            userRecordName: user.recordName, lookupInfo: UserLookupInfo(userRecordName: user.recordName),
            nameComponents: profile?.nameComponents)
        return (
            state,
            Place(
                participant: ShareParticipant(
                    participantId: UUIDText.random(), userIdentity: identity, type: .publicUser, permission: state.publicPermission,
                    acceptanceStatus: .invited), joinsPublicly: true)
        )
    }

    /// An invitation still addressed by email address or phone number only, that the caller's
    /// profile answers.
    private static func invitation(in state: ShareState, for profile: UserProfile?) -> ShareParticipant? {
        guard let profile else { return nil }
        return state.participants.first { participant in
            guard participant.userIdentity.userRecordName == nil, let info = participant.userIdentity.lookupInfo else { return false }
            if let email = info.emailAddress, let normalized = try? normalizedEmail(email), normalized == profile.emailAddress {
                return true
            }
            if let phone = info.phoneNumber, let normalized = try? normalizedPhone(phone), normalized == profile.phoneNumber {
                return true
            }
            return false
        }
    }

    /// The zone and share record at `location`, when both are there.
    static func shareRows(at location: ShareLocation, tx: ReadUnit) throws -> (zone: ZoneRow, share: RecordRow)? {
        guard let database = try tx.database(location.databaseKey),
            let zone = try tx.zone(databaseID: database.id, name: location.zoneName), !zone.isDeleted,
            let row = try tx.record(zoneID: zone.id, name: location.recordName), !row.isDeleted,
            row.recordType == Names.shareRecordType
        else { return nil }
        return (zone, row)
    }

    /// Marks the caller's participant accepted (adding them as a public participant when they
    /// join by the link): a change of the share record in its owner's database, by the caller.
    private func accept(
        _ place: Place, at location: ShareLocation, shortGUID: String, user: Caller.User, profile: UserProfile?,
        target: DatabaseTarget
    ) async throws -> ShareState {
        let stamp = ChangeStamp(timestamp: now, userRecordName: user.recordName, deviceID: target.caller.deviceID)
        let (state, queued) = try await storage.write(in: location.databaseKey) { tx -> (ShareState, Bool) in
            guard let database = try tx.database(location.databaseKey), let found = try Self.shareRows(at: location, tx: tx)
            else { throw CloudKitError(.notFound, "no share has the short GUID '\(Names.escaped(shortGUID))'") }
            var fields = try RecordCodec.decode(found.share.fields)
            guard var state = try ShareState(fields: fields), state.shortGUID == shortGUID else {
                throw CloudKitError(.notFound, "no share has the short GUID '\(Names.escaped(shortGUID))'")
            }
            var accepted = place.participant
            accepted.acceptanceStatus = .accepted
            accepted.userIdentity.userRecordName = user.recordName
            accepted.userIdentity.nameComponents = profile?.nameComponents ?? accepted.userIdentity.nameComponents
            if let index = state.participants.firstIndex(where: { $0.participantId == place.participant.participantId }) {
                state.participants[index] = accepted
            } else if place.joinsPublicly, state.publicPermission != .none {
                guard state.participants.count < Limits.participantsPerShare.value else {
                    throw CloudKitError.limitExceeded(
                        Limits.participantsPerShare, actual: state.participants.count + 1, what: "the share's participants")
                }
                state.participants.append(accepted)
            } else {
                throw CloudKitError(.accessDenied, "your invitation to this share was withdrawn while you accepted it")
            }
            state.memberIDs[user.recordName] = user.id
            state.write(into: &fields)
            let log = ChangeLog()
            try self.rewrite(found.share, fields: fields, zone: found.zone, database: database, stamp: stamp, log: log, tx: tx)
            // Accepting is not held back by the quota (the share grows by a participant).
            if log.usedBytes != 0 { try tx.addUsage(databaseID: database.id, bytes: log.usedBytes, quota: .max) }
            let queued = try self.queueForMatching(
                log.committed(in: database, deviceID: target.caller.deviceID), at: stamp.timestamp, tx: tx)
            return (state, queued)
        }
        if queued { notificationHub.wake() }
        return state
    }

    // MARK: The registry, kept by records/modify

    /// Registers a short GUID for each share the request may create and notes each invitee
    /// matched to a user as a member, before the write: a crash after leaves the registry a
    /// superset of the truth, which readers check against the share records.
    func prepareShareRegistry(
        _ batch: inout BatchShares, invitees: Invitees, request: RecordsModifyRequest, target: DatabaseTarget, shared: SharedZone?
    ) async throws {
        if let shared {
            // An administrator's edit: the share exists; whoever it may admit is noted.
            for operation in request.operations where operation.record.participants != nil {
                guard let name = operation.record.recordName else { continue }
                var location = shared.location
                location.recordName = name
                for case .user(let member, _, _) in invitees.byLookup.values where member != shared.ownerRecordName {
                    try await storage.shares.addMember(member, to: location)
                }
            }
            return
        }
        guard target.scope == .private, let user = target.caller.user, !batch.shares.isEmpty else { return }
        for name in batch.shares.sorted() {
            let location = ShareLocation(
                container: target.caller.container, environment: target.caller.environment, ownerID: user.id,
                ownerRecordName: user.recordName, zoneName: request.zoneID.zoneName, recordName: name)
            var guid = ShareState.newShortGUID()
            while try await !storage.shares.registerShortGUID(guid, for: location) { guid = ShareState.newShortGUID() }
            batch.guidByShare[name] = guid
            for case .user(let member, _, _) in invitees.byLookup.values where member != user.recordName {
                try await storage.shares.addMember(member, to: location)
            }
        }
    }

    /// Forgets the GUIDs registered for shares that turned out to have one already, or whose
    /// save failed.
    func forgetUnusedShortGUIDs(_ batch: BatchShares, outcome: [Result<RecordEntry, CloudKitError>]) async {
        guard !batch.guidByShare.isEmpty else { return }
        var used = Set<String>()
        for case .success(.record(let record)) in outcome { if let guid = record.sharing?.shortGUID { used.insert(guid) } }
        let unused = batch.guidByShare.values.filter { !used.contains($0) }
        try? await storage.shares.forgetShortGUIDs(Array(unused))
    }
}

// MARK: The share page

extension NimbusService {
    /// What the page at a share's URL needs before anyone signs in: the container and
    /// environment the GUID leads to, and an API token its script calls the server with. Nil
    /// for a GUID no share has (the page then says so). Nothing of the share itself: that is
    /// shown to signed-in participants only, through `records/resolve`.
    public func sharePage(shortGUID: String) async throws -> (container: String, environment: Environment, apiToken: String)? {
        guard shortGUID.utf8.count <= 64, let location = try await storage.shares.shareLocation(shortGUID: shortGUID) else { return nil }
        return (location.container, location.environment, try await sharePageAPIToken(container: location.container, environment: location.environment))
    }

    /// The API token of a container's share pages: derived from the installation secret, so
    /// every node and every restart has the same, and registered the first time it is needed.
    /// API tokens are not secrets (CloudKit JS apps publish theirs in their pages); this one is
    /// refused like any other when an operator revokes the environment's tokens.
    func sharePageAPIToken(container: String, environment: Environment) async throws -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(container)\u{0}\(environment.rawValue)".utf8), using: keys.sharePages)
        let token = Credentials.hex(Array(mac))
        let hash = Credentials.tokenHash(token)
        if try await accounts.credentials(apiTokenHash: hash, sessionHash: nil).apiToken != nil { return token }
        let row = APITokenRow(
            tokenHash: hash, container: container, environment: environment, createdAt: now, isRevoked: false, allowedOrigins: ["*"],
            signInCallback: nil)
        do {
            _ = try await accounts.createAPIToken(row)
        } catch {
            // Another node registered it a moment ago.
            guard try await accounts.credentials(apiTokenHash: hash, sessionHash: nil).apiToken != nil else { throw error }
        }
        return token
    }
}
