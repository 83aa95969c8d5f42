import Foundation
import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// The server's store and backups in the admin API (docs/operations.md): where the data is and
/// how far behind each read replica is, and the backups' state, for any signed-in operator of
/// every container; a backup taken now by an administrator of every container (a backup holds
/// all of them), audited.
enum BackupRoutes {
    static func add(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        routes.get("storage", needs: .everyContainer) { request, context, operatorContext in
            let replicas = (parts.storeFigures?.replicas ?? []).map { replica in
                StorageStatus.Replica(
                    name: replica.name, up: replica.isUp, lagBytes: replica.lagBytes, lagSeconds: replica.lagSeconds,
                    reads: Int64(replica.reads))
            }
            let partitioned = parts.storeFigures as? PartitionedStorage
            let partitions = (partitioned?.partitionStates ?? []).map {
                StorageStatus.Partition(name: $0.name, number: $0.number, problem: $0.problem)
            }
            // A home that does not answer has no moves to show: the page says the rest.
            let moves = ((try? await partitioned?.movesUnderway()) ?? []).map { move in
                let database = move.database
                return StorageStatus.Move(
                    database: "\(database.container) \(database.environment.rawValue) \(database.scope.rawValue) database of user \(database.ownerID)",
                    source: move.source, target: move.target, step: move.nextStep, fenced: move.fenced)
            }
            return Reply.json(
                StorageStatus(engine: parts.storeDescription, replicas: replicas, partitions: partitions, moves: moves).json, context: context)
        }
        routes.get("backups", needs: .everyContainer) { request, context, operatorContext in
            guard let keeper = parts.backups else { return Reply.json(BackupStatus.notConfigured.json, context: context) }
            return Reply.json(describe(await keeper.status()), context: context)
        }
        routes.post("backups", needs: .everyContainer) { request, context, operatorContext in
            guard let keeper = parts.backups else {
                throw CloudKitError(.badRequest, "this server keeps no backups: start it with --backup-dir")
            }
            let manifest: BackupManifest
            do {
                manifest = try await keeper.backUp()
            } catch let error as CloudKitError {
                throw error
            } catch {
                // The keeper kept the reason, in words (a full disk, a directory it cannot write).
                let reason = await keeper.status().lastFailure?.reason ?? "\(error)"
                throw CloudKitError(.internalError, "the backup failed: \(reason)")
            }
            let status = await keeper.status()
            let name = status.lastSuccess?.name ?? ""
            try await service.audit(operatorContext.account.name, "backup.take", container: nil, "\(name), taken at \(manifest.takenAt)")
            return Reply.json(describe(status), context: context)
        }
    }

    static func describe(_ status: BackupKeeper.Status) -> JSON {
        func milliseconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }
        return BackupStatus(
            directory: status.directory, keep: Int64(status.keep), running: status.running, failuresInARow: Int64(status.failuresInARow),
            backups: status.backups.map { .init(name: $0.name, takenAt: $0.takenAt, bytes: $0.bytes, nimbusVersion: $0.nimbusVersion) },
            everySeconds: status.every?.components.seconds,
            lastSuccess: status.lastSuccess.map { .init(at: milliseconds($0.at), name: $0.name, bytes: $0.bytes) },
            lastFailure: status.lastFailure.map { .init(at: milliseconds($0.at), reason: $0.reason) }
        ).json
    }
}
