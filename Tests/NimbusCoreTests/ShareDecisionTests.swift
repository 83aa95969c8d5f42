import Foundation
@testable import NimbusCore
import NimbusWire
import Testing

/// What a share save decides depends only on its inputs: a unit of work decides a save again
/// after each load, and the second decision must name the participants it adds as the first did.
@Suite struct ShareDecisionTests {
    @Test func newParticipantIDsDependOnlyOnTheSeedTheShareAndTheOrder() throws {
        let seed = SeededIDs()
        var first = NimbusService.NewParticipantIDs(seed, share: "S")
        var again = NimbusService.NewParticipantIDs(SeededIDs(seed: seed.seed), share: "S")
        let firstRun = (0..<5).map { _ in first.next() }
        #expect(firstRun == (0..<5).map { _ in again.next() })
        #expect(Set(firstRun).count == 5, "each participant a save adds has its own ID")
        for id in firstRun {
            let uuid = try #require(UUID(uuidString: id), "\(id) is a UUID")
            #expect(uuid.uuidString == id)
            #expect(Array(id)[14] == "4", "version 4: \(id)")
            #expect("89AB".contains(Array(id)[19]), "RFC 4122 variant: \(id)")
        }
        // Another share, or another batch's seed, names its participants apart.
        var otherShare = NimbusService.NewParticipantIDs(seed, share: "T")
        var otherSeed = NimbusService.NewParticipantIDs(SeededIDs(), share: "S")
        #expect(otherShare.next() != firstRun[0])
        #expect(otherSeed.next() != firstRun[0])
    }

    /// The seed is drawn when the first identifier is made, not when the value is: copies made
    /// before that (each run of a write's decision holds one) still name things alike, from
    /// whichever copy asks first.
    @Test func copiesMadeBeforeTheSeedIsDrawnShareIt() {
        let made = SeededIDs()
        let (first, second) = (made, made)
        let fromSecond = second.uuid("participant", "S", "0")
        #expect(first.uuid("participant", "S", "0") == fromSecond)
        #expect(made.bytes("short GUID", "S") == second.bytes("short GUID", "S"))
        #expect(SeededIDs().uuid("participant", "S", "0") != fromSecond, "another write's seed")
    }

    @Test func aShareWithoutARegisteredGUIDGetsTheSameOneOnEveryDecision() throws {
        let request = RecordsModifyRequest(
            operations: [RecordOperationInput(type: .create, record: RecordInput(recordName: "S", recordType: Names.shareRecordType))],
            zoneID: WireZoneID(zoneName: "Z"))
        var batch = NimbusService.BatchShares(request)
        #expect(batch.shares == ["S"])
        let unregistered = batch.shortGUID(for: "S")
        #expect(unregistered == batch.shortGUID(for: "S") && unregistered.count == 22)
        batch.guidByShare["S"] = "registered"
        #expect(batch.shortGUID(for: "S") == "registered")
    }
}
