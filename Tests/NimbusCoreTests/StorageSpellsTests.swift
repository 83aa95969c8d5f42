import Logging
@testable import NimbusCore
import NimbusStorage
import Testing

/// What the notification pipeline's stages log when a pass fails: busy or unanswering storage
/// once a spell, anything else every time. Each test is a transcript of passes and what each
/// said (a level, or nil for nothing; `passed` says "ended" or nothing).
@Suite struct StorageSpellsTests {
    static let busy = StorageError.busy("2 storage calls are waiting already (maximumPendingStorageCalls)")
    static let down = StorageError.unavailable("connection refused")

    enum Said: Equatable {
        case logged(Logger.Level)
        case silent
        case ended
    }

    struct Transcript {
        var spells = StorageSpells()
        var said: [Said] = []

        mutating func fail(_ stage: String, _ error: any Error) {
            said.append(spells.failed(stage, error).map(Said.logged) ?? .silent)
        }

        mutating func pass(_ stage: String) {
            said.append(spells.passed(stage) ? .ended : .silent)
        }
    }

    @Test func aSpellOfBusyStorageIsSaidOnceWhenItStartsAndOnceWhenItEnds() {
        var transcript = Transcript()
        transcript.fail("outbox drain", Self.busy)
        transcript.fail("outbox drain", Self.busy)
        transcript.fail("outbox drain", Self.busy)
        transcript.pass("outbox drain")
        transcript.pass("outbox drain")
        transcript.fail("outbox drain", Self.busy)  // a new spell is said again
        #expect(transcript.said == [.logged(.notice), .silent, .silent, .ended, .silent, .logged(.notice)])
    }

    @Test func stagesHaveSpellsOfTheirOwn() {
        var transcript = Transcript()
        transcript.fail("outbox drain", Self.busy)
        transcript.fail("delivery", Self.busy)
        transcript.pass("elsewhere")
        transcript.pass("delivery")
        transcript.fail("outbox drain", Self.busy)
        #expect(transcript.said == [.logged(.notice), .logged(.notice), .silent, .ended, .silent])
    }

    @Test func storageThatDoesNotAnswerIsAnErrorOnceASpell() {
        var transcript = Transcript()
        transcript.fail("delivery", Self.down)
        transcript.fail("delivery", Self.down)
        transcript.fail("delivery", Self.busy)  // busy within it is a spell of its own
        transcript.fail("delivery", Self.down)
        transcript.pass("delivery")
        transcript.fail("delivery", Self.down)
        transcript.fail("delivery", Self.busy)
        #expect(
            transcript.said == [.logged(.error), .silent, .logged(.notice), .silent, .ended, .logged(.error), .logged(.notice)])
    }

    @Test func otherFailuresAreErrorsEveryTime() {
        var transcript = Transcript()
        for error: any Error in [StorageError.corrupt("a row"), StorageError.engine("disk I/O error"), CancellationError()] {
            transcript.fail("delivery", error)
            transcript.fail("delivery", error)
        }
        #expect(transcript.said == Array(repeating: .logged(.error), count: 6))
        // One in a busy spell is still said, and does not end the spell.
        transcript = Transcript()
        transcript.fail("delivery", Self.busy)
        transcript.fail("delivery", StorageError.corrupt("a row"))
        transcript.fail("delivery", Self.busy)
        transcript.pass("outbox drain")
        transcript.pass("delivery")
        #expect(transcript.said == [.logged(.notice), .logged(.error), .silent, .silent, .ended])
    }
}
