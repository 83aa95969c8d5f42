import ArgumentParser
import Foundation
import NimbusCore
import NimbusServer
import NimbusStorage

/// `nimbus assets`: the blobs behind asset fields (docs/assets.md).
struct AssetsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "assets", abstract: "Asset blobs: what is stored, and collecting what no record holds (docs/assets.md).",
        subcommands: [Stats.self, Collect.self])

    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Blobs and bytes stored, and how many no record holds (collected once their grace period is over).")
        @OptionGroup var data: DataOptions
        @Option(help: "Only this container's blobs.") var container: String?

        func run() async throws {
            do {
                let figures = try await data.open().service.assetFigures(container: container)
                print("blobs: \(figures.blobs) (\(figures.bytes) bytes)")
                print("unreferenced: \(figures.unreferencedBlobs) (\(figures.unreferencedBytes) bytes)")
            } catch { throw reportFailure(error) }
        }
    }

    struct Collect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "gc",
            abstract: "Collect now: remove the blobs no record holds whose grace period is over, and blobs never registered.")
        @OptionGroup var data: DataOptions
        @Option(help: "Seconds a blob no record holds is kept (never less than a receipt's lifetime and five minutes).")
        var graceSeconds: Int64?

        func run() async throws {
            do {
                var configuration = try data.configuration()
                try data.requireStore(configuration)
                if let graceSeconds { configuration.service.assets.collectionGraceSeconds = graceSeconds }
                let service = try await DataDirectory.open(configuration).service
                let total = try await service.assetFigures(container: nil).unreferencedBlobs
                let bar = ProgressBar(total: Int(total))
                let collection = try await service.collectAssets { bar.show($0.blobs + $0.strays) }
                bar.finish()
                print("removed \(collection.blobs) blobs (\(collection.bytes) bytes) and \(collection.strays) never registered")
            } catch { throw reportFailure(error) }
        }
    }
}

/// A one-line progress bar on standard error, redrawn in place.
private final class ProgressBar: Sendable {
    let total: Int

    init(total: Int) { self.total = max(total, 1) }

    func show(_ done: Int) {
        let width = 30
        let filled = min(width, done * width / total)
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        FileHandle.standardError.write(Data("\r[\(bar)] \(done)/\(total)".utf8))
    }

    func finish() { FileHandle.standardError.write(Data("\n".utf8)) }
}
