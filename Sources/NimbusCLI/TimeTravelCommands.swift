import ArgumentParser
import Foundation
import NimbusCore
import NimbusStorage

/// `nimbus restore-zone` and `nimbus restore-user`: time travel (docs/operations.md). They open
/// the store as the other verbs do, so they work beside a running server: the restore is an
/// ordinary write, which the server's notification pipeline picks up from the outbox.
struct RestoreZoneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore-zone",
        abstract: "Show what going back to a moment would change in one zone, and with --apply change it (docs/operations.md).",
        discussion: """
            Without --apply nothing changes: the records it would bring back, revert and delete are listed. With --apply \
            the zone's state at --to is written as new changes, one atomic batch, so devices fetch it through the change \
            feed and subscriptions fire. Without --user, the public database's zone.
            """)
    @OptionGroup var data: DataOptions
    @OptionGroup var travel: TimeTravelOptions
    @Option(help: "The user whose private database holds the zone; leave out for the public database.") var user: String?
    @Option(help: "The zone.") var zone: String

    func run() async throws {
        try await travel.run(data: data, user: user, zone: zone)
    }
}

struct RestoreUserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore-user",
        abstract: "restore-zone for every zone of one user's private database (docs/operations.md).")
    @OptionGroup var data: DataOptions
    @OptionGroup var travel: TimeTravelOptions
    @Option(help: "The user.") var user: String

    func run() async throws {
        try await travel.run(data: data, user: user, zone: nil)
    }
}

struct TimeTravelOptions: ParsableArguments {
    @Option(help: "The container.") var container: String
    @Option(help: "development or production.") var environment: String = "development"
    @Option(help: "The moment to go back to: an ISO 8601 time such as 2026-11-25T10:00:00Z, or milliseconds since 1970.") var to: String
    @Flag(help: "Make the change; without it, only show it.") var apply = false

    func run(data: DataOptions, user: String?, zone: String?) async throws {
        do {
            let environment = try parseEnvironment(environment)
            let moment = try NimbusService.parseMoment(to, what: "--to")
            let service = try await data.open().service
            let actor = "shell:\(ProcessInfo.processInfo.environment["USER"] ?? "unknown")"
            let travel = try await service.timeTravel(
                container: container, environment: environment, userName: user, zoneName: zone, to: moment, apply: apply,
                operatorName: actor)
            let database = "\(environment.rawValue) \(user.map { "private database of \($0)" } ?? "public database")"
            var changed = 0
            for restore in travel.zones {
                print("zone \(restore.zoneName) (\(database)), back to \(NimbusService.isoMoment(travel.moment)):")
                if restore.items.isEmpty && restore.skipped.isEmpty { print("  nothing changed since") }
                for item in restore.items {
                    print("  \(item.change.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)) \(item.recordType) \(item.recordName)")
                }
                for skipped in restore.skipped { print("  left     \(skipped.recordName): \(skipped.reason)") }
                changed += restore.items.count
            }
            if apply {
                try await service.audit(
                    actor, "data.restore", container: container,
                    "\(database), \(zone.map { "zone \($0)" } ?? "every zone") to \(NimbusService.isoMoment(moment)): \(changed) record(s) restored")
                print("\(changed) record(s) restored")
            } else {
                print("\(changed) record(s) would change; nothing was written (run again with --apply to restore)")
            }
        } catch let error as ValidationError {
            throw error
        } catch { throw reportFailure(error) }
    }
}
