import NimbusStorage
import NimbusWire

extension NimbusService {
    /// What every operation of one `records/modify` batch is applied against, made once per run
    /// of the write: the request, the zone and database, who writes and under which roles, the
    /// quota, the moment, the schema, the batch's change log and what sharing allows.
    struct SaveBatch {
        let request: RecordsModifyRequest
        let zone: ZoneRow
        let database: DatabaseRow
        let target: DatabaseTarget
        /// The public database's security roles; nil elsewhere.
        let access: PublicAccess?
        let quota: Int64
        let stamp: ChangeStamp
        let schema: SchemaResolver
        let log: ChangeLog
        let sharing: SaveSharing
        /// Records a test's `conflict` fault makes conflict (taken before the write, which may run twice).
        let switchedConflicts: Set<String>
    }

    /// What sharing allows a batch: the invitees its shares name, the shares it makes, and in the
    /// shared database the owner's zone as a participant's accepted shares show it (nil in the
    /// owner's own databases).
    struct SaveSharing {
        let invitees: Invitees
        let shares: BatchShares
        let participantZone: SharedZone?

        var asParticipant: Bool { participantZone != nil }

        /// A participant's write must stay inside a share they may write to: `provisional` is the
        /// record as it would be saved. In the owner's own databases, nothing to check.
        func requireInsideWritableShare(_ provisional: RecordRow, zone: ZoneRow, tx: ReadUnit) throws {
            guard let participantZone else { return }
            guard let share = try participantZone.shows(provisional, zone: zone, tx: tx) else {
                throw CloudKitError(
                    .accessDenied,
                    "record '\(provisional.recordName)' would be outside what is shared with you; give it a parent in the shared hierarchy",
                    recordName: provisional.recordName)
            }
            try NimbusService.requireWritable(share, recordName: provisional.recordName)
        }
    }
}
