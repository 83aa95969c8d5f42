import Foundation
import Hummingbird
import NimbusCore
import NimbusWire

/// The server's backups in the admin API (docs/operations.md): their state for any signed-in
/// operator of every container, and a backup taken now by an administrator of every container
/// (a backup holds all of them), audited.
enum BackupRoutes {
    static func add(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        routes.get("backups", needs: .everyContainer) { request, context, operatorContext in
            guard let keeper = parts.backups else { return Reply.json(["configured": .bool(false)], context: context) }
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
        var object: JSONObject = [
            "configured": .bool(status.directory != nil), "keep": .int(Int64(status.keep)), "running": .bool(status.running),
            "failuresInARow": .int(Int64(status.failuresInARow)),
            "backups": .array(
                status.backups.map {
                    ["name": .string($0.name), "takenAt": .string($0.takenAt), "bytes": .int($0.bytes), "nimbusVersion": .string($0.nimbusVersion)]
                }),
        ]
        if let directory = status.directory { object["directory"] = .string(directory) }
        if let every = status.every { object["everySeconds"] = .int(every.components.seconds) }
        if let success = status.lastSuccess {
            object["lastSuccess"] = [
                "at": .int(Int64(success.at.timeIntervalSince1970 * 1000)), "name": .string(success.name), "bytes": .int(success.bytes),
            ]
        }
        if let failure = status.lastFailure {
            object["lastFailure"] = ["at": .int(Int64(failure.at.timeIntervalSince1970 * 1000)), "reason": .string(failure.reason)]
        }
        return .object(object)
    }
}
