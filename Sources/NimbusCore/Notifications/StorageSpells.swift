import Logging
import NimbusStorage

/// How the notification pipeline's background stages (the outbox drain, delivery's reads) say
/// that a pass failed.
///
/// Two failures come in spells, and the stage runs again at its next wake-up through either:
/// storage refusing a call for want of room (`StorageError.busy`: as many calls wait on it as
/// `maximumPendingStorageCalls` allows; a client hears TRY_AGAIN_LATER), which is what a
/// saturated server does by design, and storage that does not answer (`.unavailable`:
/// PostgreSQL down or failing over). Logged at every pass, each was about six error lines a
/// second for as long as it lasted. A spell is said once when it starts (busy at notice level,
/// unavailable as an error) and once when the stage gets through again; any other failure is
/// an error every time.
struct StorageSpells {
    private enum Kind { case busy, unavailable }

    /// The spells under way, by stage.
    private var spells: [String: Set<Kind>] = [:]

    /// The level to log a failed pass of `stage` at, or nil to say nothing (its spell was said).
    mutating func failed(_ stage: String, _ error: any Error) -> Logger.Level? {
        let kind: Kind, level: Logger.Level
        switch error as? StorageError {
        case .busy?: (kind, level) = (.busy, .notice)
        case .unavailable?: (kind, level) = (.unavailable, .error)
        default: return .error
        }
        return spells[stage, default: []].insert(kind).inserted ? level : nil
    }

    /// Whether a pass of `stage` that got through ends a spell (then that is said).
    mutating func passed(_ stage: String) -> Bool {
        spells.removeValue(forKey: stage) != nil
    }
}
