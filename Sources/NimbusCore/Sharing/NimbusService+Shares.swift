import NimbusStorage
import NimbusWire

/// Shares in the owner's private database (docs/sharing.md): saving a share record with its
/// participants, linking it to its root, what a share record answers, and the rule that a
/// record belongs to at most one share. A share is a record, so this runs inside
/// `records/modify`'s transaction, called from `apply`.
extension NimbusService {
    /// Who the lookup infos of a request's share participants are, found before the write
    /// (the directory is not part of the records' transaction).
    struct Invitees: Sendable {
        enum Match: Sendable {
            case user(recordName: String, userID: Int64, nameComponents: NameComponents)
            /// The lookup info names several users (an email address of one, a phone number of
            /// another): refused rather than guessed.
            case ambiguous([String])
        }
        var byLookup: [UserLookupInfo: Match] = [:]
        /// The saver's own identity, for the owner participant.
        var owner: UserIdentity?
    }

    /// The batch's shares: which root each names (a root saved with `share` set), so a share
    /// created with its root finds it.
    struct BatchShares {
        var rootByShare: [String: String] = [:]
        /// Share records the batch saves.
        var shares: Set<String> = []
        /// Short GUIDs registered for them before the write (`prepareShareRegistry`); a share
        /// that has one keeps it.
        var guidByShare: [String: String] = [:]
        /// Chosen before the write: what the save makes up is named from it (`SeededIDs`).
        let ids = SeededIDs()

        init(_ request: RecordsModifyRequest) {
            for operation in request.operations where !operation.type.isDelete {
                if let share = operation.record.share, let root = operation.record.recordName { rootByShare[share] = root }
                if operation.record.recordType == Names.shareRecordType, let name = operation.record.recordName { shares.insert(name) }
            }
        }

        /// The short GUID a share the batch creates gets: the one registered for it. A share
        /// saved without naming its type has one already; only when its stored state cannot be
        /// read does it get a new one, from the seed, unregistered (its URL leads nowhere, as
        /// before), so that deciding the save again chooses the same.
        func shortGUID(for share: String) -> String {
            guidByShare[share] ?? ShareState.shortGUID(bytes: ids.bytes("short GUID", share))
        }
    }

    /// Names the participants one save of a share adds, in order, from the batch's seed: the
    /// save decided again names them as before.
    struct NewParticipantIDs {
        let ids: SeededIDs
        let share: String
        private var ordinal = 0

        init(_ ids: SeededIDs, share: String) {
            self.ids = ids
            self.share = share
        }

        mutating func next() -> String {
            defer { ordinal += 1 }
            return ids.uuid("participant", share, String(ordinal))
        }
    }

    /// Looks up every participant the request's share records name, and the caller.
    func invitees(for request: RecordsModifyRequest, target: DatabaseTarget) async throws -> Invitees {
        var invitees = Invitees()
        let participants = request.operations.flatMap { $0.record.participants ?? [] }
        guard target.scope != .public, let user = target.caller.user,
            participants.isEmpty == false || request.operations.contains(where: { $0.record.recordType == Names.shareRecordType })
        else { return invitees }
        var lookups: [(UserLookupInfo, [UserLookup])] = []
        for participant in participants {
            guard let info = participant.userIdentity.lookupInfo ?? participant.userIdentity.userRecordName.map({ UserLookupInfo(userRecordName: $0) })
            else { continue }
            lookups.append((info, Self.lookupKeys(info)))
        }
        let ownerLookup = UserLookup.recordName(user.recordName)
        let entries = try await accounts.directory(
            container: target.caller.container, lookups: Array(Set(lookups.flatMap(\.1) + [ownerLookup])))
        func matches(_ key: UserLookup) -> [DirectoryEntry] { entries.filter { $0.matches(key) } }
        for (info, keys) in lookups {
            let found = Dictionary(keys.flatMap(matches).map { ($0.member.userRecordName, $0) }, uniquingKeysWith: { first, _ in first })
            if found.count > 1 {
                invitees.byLookup[info] = .ambiguous(found.keys.sorted())
            } else if let entry = found.values.first {
                invitees.byLookup[info] = .user(
                    recordName: entry.member.userRecordName, userID: entry.member.userID, nameComponents: entry.profile.nameComponents)
            }
        }
        let me = matches(ownerLookup).first
        invitees.owner = UserIdentity(
            userRecordName: user.recordName, lookupInfo: UserLookupInfo(userRecordName: user.recordName),
            nameComponents: me?.profile.nameComponents)
        return invitees
    }

    /// Makes or updates a share record's state in `fields`. Returns the root to link when the
    /// share was created for an existing record (`forRecord`).
    func applyShare(
        _ input: RecordInput, recordName: String, existing: RecordRow?, existingFields: RecordCodec.Fields,
        fields: inout RecordCodec.Fields, zone: ZoneRow, target: DatabaseTarget, invitees: Invitees, batch: BatchShares,
        asParticipant: Bool = false, tx: UnitOfWork
    ) throws -> String? {
        if asParticipant {
            try applyShareAsAdministrator(
                input, recordName: recordName, existingFields: existingFields, fields: &fields, caller: target.caller,
                invitees: invitees, newIDs: NewParticipantIDs(batch.ids, share: recordName))
            return nil
        }
        guard target.scope == .private, zone.name != Names.defaultZone else {
            throw CloudKitError(
                .badRequest,
                "a share lives in a custom zone of its owner's private database; '\(Names.escaped(zone.name))' in the \(target.scope.rawValue) database cannot hold one",
                recordName: recordName)
        }
        let previous = try ShareState(fields: existingFields)
        let zoneWide = recordName == Names.zoneWideShareName
        var linkRoot: String?
        let root: String?
        if let previous {
            if let forRecord = input.forRecord, forRecord.recordName != previous.rootRecordName {
                throw CloudKitError(
                    .badRequest, "share '\(recordName)' is for record '\(previous.rootRecordName ?? "(the zone)")'; a share's root cannot change",
                    recordName: recordName)
            }
            root = previous.rootRecordName
        } else if zoneWide {
            if input.forRecord != nil || batch.rootByShare[recordName] != nil {
                throw CloudKitError(
                    .badRequest, "'\(Names.zoneWideShareName)' shares the whole zone; it has no root record (leave out forRecord)",
                    recordName: recordName)
            }
            try requireNoSharesInZone(zone, tx: tx, recordName: recordName)
            root = nil
        } else if let forRecord = input.forRecord {
            guard let rootRow = try tx.record(zoneID: zone.id, name: forRecord.recordName), !rootRow.isDeleted else {
                throw CloudKitError(.notFound, "forRecord: record '\(forRecord.recordName)' does not exist", recordName: recordName)
            }
            if let tag = forRecord.recordChangeTag, tag != RecordCodec.changeTag(rootRow.changeSequence) {
                throw CloudKitError(
                    .conflict,
                    "forRecord: record '\(forRecord.recordName)' changed on the server (change tag \(RecordCodec.changeTag(rootRow.changeSequence))); fetch it and share again",
                    recordName: recordName)
            }
            try requireShareable(rootRow, as: recordName, zone: zone, tx: tx)
            root = forRecord.recordName
            linkRoot = forRecord.recordName
        } else if let batchRoot = batch.rootByShare[recordName] {
            root = batchRoot
        } else {
            throw CloudKitError(
                .badRequest,
                "share '\(recordName)' needs a root: send forRecord, or save the root in the same request with its share set to this record; name it '\(Names.zoneWideShareName)' to share the whole zone",
                recordName: recordName)
        }
        let publicPermission = input.publicPermission ?? previous?.publicPermission ?? .none
        if publicPermission == .unknown {
            throw CloudKitError(.badRequest, "publicPermission: UNKNOWN cannot be set; use NONE, READ_ONLY or READ_WRITE", recordName: recordName)
        }
        var participants = try participantsAfterSave(
            input.participants, previous: previous?.participants ?? [], invitees: invitees,
            newIDs: NewParticipantIDs(batch.ids, share: recordName), recordName: recordName)
        // Back to NONE: everyone who joined by the URL goes (docs/sharing.md).
        if publicPermission == .none { participants.removeAll { $0.type == .publicUser } }
        var otherKeys = previous?.otherKeys ?? [:]
        for (key, value) in input.otherKeys.pairs { otherKeys[key] = value }
        var state = ShareState(
            shortGUID: previous?.shortGUID ?? batch.shortGUID(for: recordName), publicPermission: publicPermission,
            participants: participants, rootRecordName: root, otherKeys: otherKeys)
        state.memberIDs = Self.memberIDs(previous?.memberIDs ?? [:], invitees: invitees, caller: target.caller)
        state.write(into: &fields)
        return linkRoot
    }

    /// A change to a share by one of its participants, in their shared database: an
    /// administrator may add and remove participants other than the owner and administrators,
    /// and set `publicPermission`; anyone else only leaves (by deleting the share).
    private func applyShareAsAdministrator(
        _ input: RecordInput, recordName: String, existingFields: RecordCodec.Fields, fields: inout RecordCodec.Fields,
        caller: Caller, invitees: Invitees, newIDs: NewParticipantIDs
    ) throws {
        guard var state = try ShareState(fields: existingFields),
            let me = state.participant(userRecordName: caller.user?.recordName), me.type == .administrator
        else {
            throw CloudKitError(
                .accessDenied,
                "only the share's owner and administrators change it; a participant leaves by deleting the share from their shared database",
                recordName: recordName)
        }
        if let permission = input.publicPermission {
            guard permission != .unknown else {
                throw CloudKitError(.badRequest, "publicPermission: UNKNOWN cannot be set; use NONE, READ_ONLY or READ_WRITE", recordName: recordName)
            }
            state.publicPermission = permission
        }
        if input.participants != nil {
            let after = try participantsAfterSave(
                input.participants, previous: state.participants, invitees: invitees, newIDs: newIDs, recordName: recordName)
            // The owner and every other administrator stay as they were.
            for kept in state.participants where kept.type == .owner || (kept.type == .administrator && kept.participantId != me.participantId) {
                guard after.contains(kept) else {
                    throw CloudKitError(
                        .accessDenied, "an administrator cannot remove or change the owner or another administrator", recordName: recordName)
                }
            }
            if let promoted = after.first(where: { $0.type == .administrator && !state.participants.contains($0) }) {
                throw CloudKitError(
                    .accessDenied,
                    "only the owner makes administrators (\(promoted.userIdentity.lookupInfo?.emailAddress ?? promoted.participantId ?? "a participant"))",
                    recordName: recordName)
            }
            state.participants = after
        }
        if state.publicPermission == .none { state.participants.removeAll { $0.type == .publicUser } }
        for (key, value) in input.otherKeys.pairs { state.otherKeys[key] = value }
        state.memberIDs = Self.memberIDs(state.memberIDs, invitees: invitees, caller: caller)
        state.write(into: &fields)
    }

    /// The user ids known for a share's people: those kept, the invitees matched to users, and
    /// the saver.
    static func memberIDs(_ kept: [String: Int64], invitees: Invitees, caller: Caller) -> [String: Int64] {
        var ids = kept
        for case .user(let name, let id, _) in invitees.byLookup.values { ids[name] = id }
        if let user = caller.user { ids[user.recordName] = user.id }
        return ids
    }

    /// A participant leaving: they are taken off the share, which stays for everyone else.
    func leaveShare(
        _ share: RecordRow, caller: Caller, zone: ZoneRow, database: DatabaseRow, stamp: ChangeStamp, log: ChangeLog,
        tx: UnitOfWork
    ) throws {
        var fields = try RecordCodec.decode(share.fields)
        guard var state = try ShareState(fields: fields), let me = caller.user?.recordName else { return }
        state.participants.removeAll { $0.userIdentity.userRecordName == me && $0.type != .owner }
        state.write(into: &fields)
        try rewrite(share, fields: fields, zone: zone, database: database, stamp: stamp, log: log, tx: tx)
    }

    /// Saves new fields of a record the server changes for its own reasons (a share's state, a
    /// root's share): a change like any other, with a change tag of its own, in the feed.
    /// Neither touches an indexed field, so the indexes stay.
    @discardableResult
    func rewrite(
        _ row: RecordRow, fields: RecordCodec.Fields, zone: ZoneRow, database: DatabaseRow, stamp: ChangeStamp, log: ChangeLog,
        tx: UnitOfWork
    ) throws -> RecordRow {
        var changed = row
        changed.fields = RecordCodec.encode(fields)
        changed.changeSequence = try tx.nextRecordSequence(in: zone)
        changed.modified = stamp
        _ = try tx.putRecord(changed, isNew: false)
        log.recordChanged(zone: zone, before: row, after: changed)
        return changed
    }

    /// The participants a save leaves: the owner always, first; with `sent` (the share's whole
    /// list, as clients send it) the others are those sent, matched to who they were by
    /// `participantId` or user; without it, as they were. `newIDs` names those it adds.
    private func participantsAfterSave(
        _ sent: [ShareParticipant]?, previous: [ShareParticipant], invitees: Invitees, newIDs: NewParticipantIDs,
        recordName: String
    ) throws -> [ShareParticipant] {
        var unusedIDs = newIDs
        let owner =
            previous.first { $0.type == .owner }
            ?? ShareParticipant(
                participantId: unusedIDs.next(), userIdentity: invitees.owner ?? UserIdentity(), type: .owner,
                permission: .readWrite, acceptanceStatus: .accepted)
        guard let sent else { return previous.isEmpty ? [owner] : previous }
        var result = [owner]
        for (index, participant) in sent.enumerated() {
            let path = "participants[\(index)]"
            if participant.type == .owner || participant.participantId == owner.participantId
                || (participant.userIdentity.userRecordName ?? participant.userIdentity.lookupInfo?.userRecordName)
                    == owner.userIdentity.userRecordName
            {
                continue  // the owner is kept as the server has them
            }
            if let id = participant.participantId, let known = previous.first(where: { $0.participantId == id }) {
                var kept = known
                kept.permission = try permission(participant.permission ?? known.permission, path: path, recordName: recordName)
                if let type = participant.type, type != .publicUser { kept.type = try role(type, path: path, recordName: recordName) }
                kept.otherKeys = participant.otherKeys
                result.append(kept)
                continue
            }
            guard let info = participant.userIdentity.lookupInfo
                ?? participant.userIdentity.userRecordName.map({ UserLookupInfo(userRecordName: $0) }),
                info.emailAddress != nil || info.phoneNumber != nil || info.userRecordName != nil
            else {
                throw CloudKitError(
                    .badRequest,
                    "\(path).userIdentity: say who to invite with lookupInfo (emailAddress, phoneNumber or userRecordName)",
                    recordName: recordName)
            }
            var identity = UserIdentity(lookupInfo: info)
            switch invitees.byLookup[info] {
            case .ambiguous(let names)?:
                throw CloudKitError(
                    .badRequest,
                    "\(path).userIdentity.lookupInfo names \(names.count) different users (\(names.joined(separator: ", "))); invite each by one email address, phone number or user record name",
                    recordName: recordName)
            case .user(let name, _, let components)?:
                if name == owner.userIdentity.userRecordName { continue }
                identity.userRecordName = name
                identity.nameComponents = components
            case nil:
                break  // nobody with that address yet: matched when someone accepts with it
            }
            // The same person twice: once is enough.
            if let name = identity.userRecordName, result.contains(where: { $0.userIdentity.userRecordName == name }) { continue }
            if result.contains(where: { $0.userIdentity.userRecordName == nil && $0.userIdentity.lookupInfo == info }) { continue }
            if let known = previous.first(where: { same($0, identity) }) {
                var kept = known
                kept.permission = try permission(participant.permission ?? known.permission, path: path, recordName: recordName)
                result.append(kept)
                continue
            }
            if participant.type == .publicUser {
                throw CloudKitError(
                    .badRequest, "\(path).type: public participants join by the share's URL; they cannot be invited", recordName: recordName)
            }
            result.append(
                ShareParticipant(
                    participantId: unusedIDs.next(), userIdentity: identity,
                    type: try role(participant.type ?? .user, path: path, recordName: recordName),
                    permission: try permission(participant.permission ?? .readOnly, path: path, recordName: recordName),
                    acceptanceStatus: .invited, otherKeys: participant.otherKeys))
        }
        guard result.count <= Limits.participantsPerShare.value else {
            var error = CloudKitError.limitExceeded(
                Limits.participantsPerShare, actual: result.count, what: "share '\(recordName)''s participants, the owner included")
            error.recordName = recordName
            throw error
        }
        return result
    }

    private func same(_ participant: ShareParticipant, _ identity: UserIdentity) -> Bool {
        if let name = identity.userRecordName { return participant.userIdentity.userRecordName == name }
        return participant.userIdentity.userRecordName == nil && participant.userIdentity.lookupInfo == identity.lookupInfo
    }

    private func permission(_ permission: SharePermission?, path: String, recordName: String) throws -> SharePermission {
        guard let permission, permission == .readOnly || permission == .readWrite else {
            throw CloudKitError(
                .badRequest, "\(path).permission: a participant reads (READ_ONLY) or reads and writes (READ_WRITE)", recordName: recordName)
        }
        return permission
    }

    private func role(_ type: ParticipantType, path: String, recordName: String) throws -> ParticipantType {
        guard type == .user || type == .administrator else {
            throw CloudKitError(
                .badRequest, "\(path).type: an invited participant is a USER or an ADMINISTRATOR, not \(type.rawValue)",
                recordName: recordName)
        }
        return type
    }

    // MARK: One share per record

    /// Refuses to make `row` the root of share `shareName` when a share already covers it: its
    /// own, another root up its parent chain, or the zone's.
    func requireShareable(_ row: RecordRow, as shareName: String, zone: ZoneRow, tx: ReadUnit) throws {
        try requireShareable(
            recordName: row.recordName, recordType: row.recordType, sharedBy: ShareState.sharedBy(try RecordCodec.decode(row.fields)),
            parent: row.parent, as: shareName, zone: zone, tx: tx)
    }

    /// The same, for a record as it is being saved.
    func requireShareable(
        recordName: String, recordType: String, sharedBy: String?, parent: String?, as shareName: String, zone: ZoneRow,
        tx: ReadUnit
    ) throws {
        if recordType == Names.shareRecordType {
            throw CloudKitError(.badRequest, "a share cannot be shared; share its root record", recordName: recordName)
        }
        if let own = sharedBy, own != shareName {
            throw CloudKitError(
                .alreadyShared, "record '\(recordName)' is already shared by share '\(own)'; a record belongs to one share",
                recordName: recordName)
        }
        if let zoneShare = try tx.record(zoneID: zone.id, name: Names.zoneWideShareName), !zoneShare.isDeleted {
            throw CloudKitError(
                .alreadyShared, "zone '\(zone.name)' is shared whole ('\(Names.zoneWideShareName)'); its records cannot be shared one by one",
                recordName: recordName)
        }
        if let ancestor = try sharedAncestor(recordName: recordName, parent: parent, zone: zone, tx: tx) {
            throw CloudKitError(
                .alreadyShared,
                "record '\(recordName)' is in the hierarchy of record '\(ancestor.root)', shared by '\(ancestor.share)'; a record belongs to one share",
                recordName: recordName)
        }
        try requireNoSharedDescendant(of: recordName, except: shareName, zone: zone, tx: tx)
    }

    /// Refuses when a record below `recordName` roots a share (other than `except`): the
    /// records between would belong to two. Found from the zone's shares (few) up their roots'
    /// parent chains, since records are not indexed by parent.
    func requireNoSharedDescendant(of recordName: String, except: String?, zone: ZoneRow, tx: ReadUnit) throws {
        let shares = try tx.recordChanges(zoneID: zone.id, after: 0, recordTypes: [Names.shareRecordType], limit: Limits.resultsPerPage.value)
        for share in shares where !share.isDeleted && share.recordName != except {
            guard let root = try ShareState(fields: RecordCodec.decode(share.fields))?.rootRecordName, root != recordName,
                let row = try tx.record(zoneID: zone.id, name: root), !row.isDeleted
            else { continue }
            var next = row.parent
            var seen: Set<String> = [root]
            for _ in 0..<Limits.shareDepth.value {
                guard let name = next, seen.insert(name).inserted else { break }
                if name == recordName {
                    throw CloudKitError(
                        .alreadyShared,
                        "record '\(root)', below record '\(recordName)', is shared by '\(share.recordName)'; a record belongs to one share",
                        recordName: recordName)
                }
                next = try tx.record(zoneID: zone.id, name: name).flatMap { $0.isDeleted ? nil : $0.parent }
            }
        }
    }

    /// The nearest record up a record's parent chain (not the record itself) that roots a share.
    func sharedAncestor(recordName: String, parent: String?, zone: ZoneRow, tx: ReadUnit) throws
        -> (root: String, share: String)?
    {
        var next = parent
        var seen: Set<String> = [recordName]
        for _ in 0..<Limits.shareDepth.value {
            guard let name = next, seen.insert(name).inserted,
                let parent = try tx.record(zoneID: zone.id, name: name), !parent.isDeleted
            else { return nil }
            if let share = ShareState.sharedBy(try RecordCodec.decode(parent.fields)) { return (parent.recordName, share) }
            next = parent.parent
        }
        return nil
    }

    /// A zone-wide share may not join shares of single hierarchies in its zone.
    private func requireNoSharesInZone(_ zone: ZoneRow, tx: ReadUnit, recordName: String) throws {
        let shares = try tx.recordChanges(zoneID: zone.id, after: 0, recordTypes: [Names.shareRecordType], limit: Limits.resultsPerPage.value)
        if let other = shares.first(where: { !$0.isDeleted && $0.recordName != Names.zoneWideShareName })?.recordName {
            throw CloudKitError(
                .alreadyShared,
                "zone '\(zone.name)' already has share '\(other)' of one hierarchy; delete it before sharing the whole zone",
                recordName: recordName)
        }
    }

    /// The share covering a record in its owner's zone, whoever asks: the share of the nearest
    /// root up its parent chain (the record itself included). Zone-wide shares are not
    /// looked for: they cover everything, and their participants hear every deletion.
    func coveringShare(recordName: String, fields: RecordCodec.Fields, parent: String?, zone: ZoneRow, tx: ReadUnit) throws
        -> String?
    {
        if let own = ShareState.sharedBy(fields) { return own }
        return try sharedAncestor(recordName: recordName, parent: parent, zone: zone, tx: tx)?.share
    }

    /// Notes on a record that leaves a share (its new parent chain reaches no shared root, or
    /// another share's) which share it left, so that share's participants hear it go (those of
    /// a share covering it still see it: coverage is asked first); clears the note when it
    /// joins a share from none. Returns the move when the share covering it changed
    /// (`was` → `now`), which its descendants follow (`carryDescendants`).
    @discardableResult
    func noteShareLeft(
        recordName: String, before: RecordRow?, fields: inout RecordCodec.Fields, parent: String?, zone: ZoneRow,
        tx: ReadUnit
    ) throws -> (was: String?, now: String?)? {
        guard let before, before.parent != parent else { return nil }
        let now = try coveringShare(recordName: recordName, fields: fields, parent: parent, zone: zone, tx: tx)
        let was = try coveringShare(recordName: recordName, fields: RecordCodec.decode(before.fields), parent: before.parent, zone: zone, tx: tx)
        guard was != now else { return nil }
        ShareState.set(ShareState.leftField, Self.leftNote(was), in: &fields)
        return (was, now)
    }

    /// The note a record keeps of the share it left: the one it was in, if any.
    private static func leftNote(_ was: String?) -> FieldValue? { was.map(FieldValue.string) }

    /// A record that left a share (or joined one) takes the records below it along: each is
    /// written again with the same fields (a new change tag; the note of the share it left set,
    /// or cleared when it is covered), so participants' change feeds carry them as well: a
    /// moved-out grandchild is reported deleted, a moved-in one is sent. Records are not indexed
    /// by parent, so the zone is read once to find them; a move of a record with children
    /// across a share's edge is rare, and the owner's devices see those records change too.
    func carryDescendants(
        of recordName: String, move: (was: String?, now: String?), zone: ZoneRow, stamp: ChangeStamp, log: ChangeLog, tx: UnitOfWork
    ) throws {
        var children: [String: [RecordRow]] = [:]
        var after: Int64 = 0
        while true {
            let page = try tx.recordChanges(zoneID: zone.id, after: after, recordTypes: nil, limit: 1_000)
            for row in page where !row.isDeleted { if let parent = row.parent { children[parent, default: []].append(row) } }
            guard let last = page.last, page.count == 1_000 else { break }
            after = last.changeSequence
        }
        var queue = children[recordName] ?? []
        var seen: Set<String> = [recordName]
        while !queue.isEmpty {
            let row = queue.removeFirst()
            guard seen.insert(row.recordName).inserted, row.recordType != Names.shareRecordType else { continue }
            var fields = try RecordCodec.decode(row.fields)
            ShareState.set(ShareState.leftField, Self.leftNote(move.was), in: &fields)
            var carried = row
            carried.fields = RecordCodec.encode(fields)
            carried.changeSequence = try tx.nextRecordSequence(in: zone)
            carried.modified = stamp
            _ = try tx.putRecord(carried, isNew: false)
            log.recordChanged(zone: zone, before: row, after: carried)
            queue += children[row.recordName] ?? []
        }
    }

    // MARK: Linking roots

    /// A record saved with `share` set: it becomes that share's root, the share being saved
    /// later in the same request (CloudKit's native pattern) or already its share.
    func linkToShare(
        _ shareName: String, recordName: String, recordType: String, fields: inout RecordCodec.Fields, parent: String?,
        zone: ZoneRow, target: DatabaseTarget, batch: BatchShares, tx: ReadUnit
    ) throws {
        guard target.scope == .private, zone.name != Names.defaultZone else {
            throw CloudKitError(
                .badRequest, "a record in \(zone.name == Names.defaultZone ? "the default zone" : "the \(target.scope.rawValue) database") cannot be shared; share records of a custom zone of your private database",
                recordName: recordName)
        }
        if let shareRow = try tx.record(zoneID: zone.id, name: shareName), !shareRow.isDeleted {
            guard shareRow.recordType == Names.shareRecordType,
                try ShareState(fields: RecordCodec.decode(shareRow.fields))?.rootRecordName == recordName
            else {
                throw CloudKitError(
                    .badRequest, "share: record '\(shareName)' is not a share of record '\(recordName)'; a share's root is set when the share is made",
                    recordName: recordName)
            }
        } else if !batch.shares.contains(shareName) {
            throw CloudKitError(
                .notFound, "share: share '\(shareName)' does not exist; save it in the same request as its root", recordName: recordName)
        }
        try requireShareable(
            recordName: recordName, recordType: recordType, sharedBy: ShareState.sharedBy(fields), parent: parent, as: shareName,
            zone: zone, tx: tx)
        ShareState.set(ShareState.rootField, .string(shareName), in: &fields)
    }

    /// Sets (or clears, with nil) a root record's share: a change of the root, with its own
    /// change tag, as CloudKit's `share` system field is.
    func setRootShare(
        _ rootName: String, to share: String?, zone: ZoneRow, database: DatabaseRow, stamp: ChangeStamp, log: ChangeLog,
        tx: UnitOfWork
    ) throws {
        guard let root = try tx.record(zoneID: zone.id, name: rootName), !root.isDeleted else { return }
        var fields = try RecordCodec.decode(root.fields)
        guard ShareState.sharedBy(fields) != share else { return }
        ShareState.set(ShareState.rootField, share.map { .string($0) }, in: &fields)
        try rewrite(root, fields: fields, zone: zone, database: database, stamp: stamp, log: log, tx: tx)
    }

    // MARK: Answers

    /// The share keys of a record's answer: `share` on a root, the participants and URL on a
    /// share record. Only a row that holds reserved fields (`RecordCodec.holdsReservedFields`,
    /// which `recordOutput` looks for once) can have any.
    func sharingOutput(_ row: RecordRow, target: DatabaseTarget) throws -> (share: String?, facts: ShareFacts?) {
        let fields = try RecordCodec.decode(row.fields)
        let sharedBy = ShareState.sharedBy(fields)
        guard row.recordType == Names.shareRecordType, let state = try ShareState(fields: fields) else { return (sharedBy, nil) }
        let me = target.caller.user?.recordName
        let base = target.assetBaseURL
        // The owner and administrators see everyone; anyone else the owner and themselves (the
        // least CloudKit shows), so a public link does not hand out every invitee's address.
        let viewer = state.participant(userRecordName: me)
        let seesAll = viewer?.type == .owner || viewer?.type == .administrator
        let visible = seesAll ? state.participants : state.participants.filter { $0.type == .owner || $0.userIdentity.userRecordName == me }
        return (
            sharedBy,
            ShareFacts(
                shortGUID: state.shortGUID, publicPermission: state.publicPermission, participants: visible,
                owner: state.owner, currentUserParticipant: state.participant(userRecordName: me),
                webpageURL: base.map { "\($0)/share/\(state.shortGUID)" },
                displayedHostname: base.flatMap { URLText.host(of: $0) }, otherKeys: state.otherKeys))
    }
}

/// The host (and port) of a base URL such as `https://example.com:8443`.
enum URLText {
    static func host(of url: String) -> String? {
        guard let range = url.range(of: "://") else { return nil }
        let rest = url[range.upperBound...]
        return String(rest.prefix { $0 != "/" })
    }
}

extension DirectoryEntry {
    /// Whether this member is the one a lookup key names.
    func matches(_ key: UserLookup) -> Bool {
        switch key {
        case .email(let email): profile.emailAddress == email
        case .phone(let phone): profile.phoneNumber == phone
        case .recordName(let name): member.userRecordName == name
        }
    }
}
