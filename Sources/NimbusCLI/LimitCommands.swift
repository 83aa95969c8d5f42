import ArgumentParser
import Foundation
import NimbusCore
import NimbusStorage

/// `nimbus limits` and `nimbus quotas`: a container's request budgets and quotas, each its
/// own overrides over the server's defaults (docs/limits.md).
struct LimitsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "limits", abstract: "Show or change a container's request budgets (docs/limits.md).",
        subcommands: [Show.self, Set.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Each budget: the number in force, and whether it is the default.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            do {
                let limits = try await data.open().service.limits(container: container)
                printLimits(limits, quotas: false)
            } catch { throw reportFailure(error) }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set budgets: name=number, or name=default for the server's number (e.g. userRequestsPerMinute=3000).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Argument(help: "name=number or name=default, one or more.") var settings: [String]

        func run() async throws { try await setLimits(data, container: container, settings, quotas: false) }
    }
}

struct QuotasCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quotas", abstract: "Show or change a container's storage quotas and what is stored (docs/limits.md).",
        subcommands: [Show.self, Set.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The quotas, the public database's bytes in each environment, and a user's private database with --user.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "A user name: show their private database too.") var user: String?

        func run() async throws {
            do {
                let service = try await data.open().service
                printLimits(try await service.limits(container: container), quotas: true)
                for environment in Environment.allCases {
                    let usage = try await service.publicUsage(container: container, environment: environment)
                    print("public database (\(environment.rawValue)): \(readableSize(usage.usedBytes)) of \(readableSize(usage.quotaBytes))\(versions(usage))")
                    if let user {
                        let usage = try await service.privateUsage(container: container, environment: environment, userName: user)
                        print(
                            "\(user)'s private database (\(environment.rawValue)): \(readableSize(usage.usedBytes)) of \(readableSize(usage.quotaBytes))\(versions(usage))")
                    }
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set quotas in bytes: name=number, or name=default (e.g. privateDatabaseBytes=5368709120).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Argument(help: "name=number or name=default, one or more.") var settings: [String]

        func run() async throws { try await setLimits(data, container: container, settings, quotas: true) }
    }
}

private func printLimits(_ limits: EffectiveLimits, quotas: Bool) {
    for limit in ContainerLimit.allCases where limit.isQuota == quotas {
        let origin = limits.overrides[limit.rawValue] == nil ? "default" : "set for this container"
        // Quotas are bytes: the number to set, and the size to read.
        let readable = quotas ? " = \(readableSize(limits[limit]))" : ""
        print("\(limit.rawValue) = \(limits[limit])\(readable)  (\(origin))")
    }
}

/// Reads `name=number` / `name=default` settings of one kind (budgets or quotas) and applies them.
private func setLimits(_ data: DataOptions, container: String, _ settings: [String], quotas: Bool) async throws {
    var changes: [ContainerLimit: Int64?] = [:]
    let kind = quotas ? "quota" : "budget"
    for setting in settings {
        let parts = setting.split(separator: "=", maxSplits: 1).map(String.init)
        let names = ContainerLimit.allCases.filter { $0.isQuota == quotas }.map(\.rawValue)
        guard parts.count == 2, let limit = ContainerLimit(rawValue: parts[0]), limit.isQuota == quotas else {
            throw ValidationError("'\(setting)' names no \(kind); use name=number with one of: \(names.joined(separator: ", "))")
        }
        if parts[1] == "default" {
            changes[limit] = .some(nil)
        } else if let value = Int64(parts[1]) {
            changes[limit] = value
        } else {
            throw ValidationError("'\(parts[1])' is not a whole number (or 'default') for \(limit.rawValue)")
        }
    }
    guard !changes.isEmpty else { throw ValidationError("name at least one \(kind): name=number") }
    do {
        let service = try await data.open().service
        try await service.setLimits(container: container, changes)
        printLimits(try await service.limits(container: container), quotas: quotas)
    } catch { throw reportFailure(error) }
}

/// What a database's kept versions take, as `nimbus quotas show` adds it after the quota.
private func versions(_ usage: DatabaseUsage) -> String {
    usage.historyBytes == 0 ? "" : " (and \(readableSize(usage.historyBytes)) of earlier versions kept for time travel, not counted)"
}

/// A byte count as people read it, in powers of 1,024 as quotas are set (and as the dashboard
/// shows them): 903 B, 45.8 KB, 1.0 GB.
func readableSize(_ bytes: Int64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024, unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(bytes) B" : String(format: "%.1f", value) + " " + units[unit]
}
