import ArgumentParser
import Foundation
import NimbusServer

/// `nimbus backup` and `nimbus restore` (docs/operations.md).
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Back up the data directory's store and assets while the server runs, or check a backup (docs/operations.md).",
        subcommands: [Take.self, Verify.self], defaultSubcommand: Take.self)

    struct Take: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Take a backup into a new directory (the server may keep serving; `nimbus backup --to PATH` for short).")
        @OptionGroup var data: DataOptions
        @Option(
            help: "The new directory to write the backup to, or s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET/PREFIX/NAME to upload it as NAME (refused if it exists)."
        ) var to: String

        func run() async throws {
            do {
                let configuration = try data.configuration()
                try data.requireStore(configuration)
                let directory = try await DataDirectory.open(configuration)
                let manifest: BackupManifest
                do {
                    manifest = try await Backups.take(of: directory, dataDirectory: configuration.dataDirectory, toLocation: to)
                } catch {
                    try? await directory.storage.close()
                    throw error
                }
                try await directory.storage.close()
                print(summary(manifest, at: Backups.displayed(to)))
                if !manifest.missingBlobs.isEmpty {
                    FileHandle.standardError.write(
                        Data("nimbus: warning: \(manifest.missingBlobs.count) asset blobs the registry names were already missing from the blob store; the backup lists them under missingBlobs\n".utf8))
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check every file of a backup against its manifest's checksums.")
        @Argument(help: "The backup's directory, or s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET/PREFIX/NAME for one in a bucket.")
        var path: String

        func run() async throws {
            do {
                let manifest = try await Backups.verify(location: path)
                print("backup is whole: " + summary(manifest, at: Backups.displayed(path)))
            } catch { throw reportFailure(error) }
        }
    }
}

struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Make a new data directory (and store) from a backup; never overwrites (docs/operations.md).")
    @OptionGroup var data: DataOptions
    @Argument(help: "The backup's directory, or s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET/PREFIX/NAME for one in a bucket.")
    var path: String

    func run() async throws {
        do {
            let manifest = try await Backups.restore(location: path, into: data.configuration())
            print("restored the backup of \(manifest.takenAt) into \(data.dataDir); start it with: nimbus serve --data-dir \(data.dataDir)")
        } catch { throw reportFailure(error) }
    }
}

private func summary(_ manifest: BackupManifest, at path: String) -> String {
    let bytes = manifest.files.reduce(Int64(0)) { $0 + $1.bytes }
    return "\(path): \(manifest.store.engine) store taken at \(manifest.takenAt) by Nimbus \(manifest.nimbusVersion), "
        + "\(manifest.store.blobKeys.count - manifest.missingBlobs.count) asset blobs, \(manifest.files.count) files, \(bytes) bytes, checksum \(manifest.checksum.prefix(16))"
}
