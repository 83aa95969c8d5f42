import NimbusStorage
import NimbusWire

/// What the store keeps for a while and then lets go (docs/operations.md): records' earlier
/// versions past `recordHistoryDays`, the audit log past `auditLogDays` and `auditLogEntries`.
/// `nimbus serve` runs `runRetention`; the request log trims itself as it is written
/// (`RequestArchive`).
extension NimbusService {
    /// Removes record versions past the retention; returns how many went.
    public func pruneRecordHistory() async throws -> Int {
        guard let history = recordHistory else { return 0 }
        let state = try await history.recordHistoryState()
        guard state.days > 0 else { return 0 }
        return try await history.pruneRecordHistory(before: now - Int64(state.days) * 86_400_000)
    }

    /// Removes audit entries older than `days` and the oldest past `entries`; returns how many went.
    public func pruneAuditLog(days: Int = Limits.auditLogDays.value, entries: Int = Limits.auditLogEntries.value) async throws -> Int {
        try await storage.operators.pruneAudit(before: now - Int64(days) * 86_400_000, keepingAtMost: entries)
    }

    /// Prunes now, then every `Options.recordHistoryPruneInterval`, until cancelled.
    public func runRetention() async {
        while !Task.isCancelled {
            do {
                _ = try await pruneRecordHistory()
            } catch {
                logger.warning("pruning record versions failed, will try again: \(error)")
            }
            do {
                _ = try await pruneAuditLog()
            } catch {
                logger.warning("trimming the audit log failed, will try again: \(error)")
            }
            do {
                try await Task.sleep(for: options.recordHistoryPruneInterval)
            } catch {
                return
            }
        }
    }
}
