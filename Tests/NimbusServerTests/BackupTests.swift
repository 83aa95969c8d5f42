import Foundation
import Logging
import NIOCore
import NimbusBlobs
import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// `nimbus backup`, `nimbus backup verify` and `nimbus restore` (docs/operations.md), run as an
/// operator runs them: real processes on a real data directory, beside a server taking writes.
@Suite struct BackupTests {
    @Test func aBackupTakenUnderWritersRestoresEveryAcknowledgedWriteForTheSameAppsUsersAndDevices() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        let backup = dataDirectory + "-backup"
        let restored = dataDirectory + "-restored"
        defer { for path in [dataDirectory, backup, restored] { try? FileManager.default.removeItem(atPath: path) } }
        let (server, client) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        defer { server.stop() }
        try await expectEqual(client.createZone("Notes").status, 200)
        let photoBytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let photo = try await AssetTests.upload(client, photoBytes)
        try await expectEqual(client.modify(zone: "Notes", [AssetTests.photo("photo", photo)]).status, 200)
        // A device syncs before the backup; its token must still work against the restored store.
        let deviceToken = try #require(try await client.zoneChanges("Notes").zones.first?["syncToken"]?.stringValue)

        // Eight writers save atomic batches of three until told to stop; the backup starts once
        // some are acknowledged and runs while they go on.
        let writes = AcknowledgedBatches()
        let stop = LockedFlag()
        let writers = (0..<8).map { writer in
            Task {
                var batch = 0
                while !stop.isSet {
                    let names = (0..<3).map { "w\(writer)-\(batch)-\($0)" }
                    batch += 1
                    writes.attempted(names)
                    let saved = try? await client.modify(
                        zone: "Notes", atomic: true, names.map { Op.create($0, ["title": Op.field(.string($0))]) })
                    if saved?.status == 200, saved?.records.allSatisfy({ $0.errorCode == nil }) == true { writes.acknowledged(names) }
                }
            }
        }
        while writes.acknowledgedCount < 60 { try await Task.sleep(for: .milliseconds(20)) }
        let data = try await NimbusProcess.dataArguments(dataDirectory)
        let acknowledgedBeforeBackup = writes.acknowledgedSoFar
        let taken = try await Task.detached { try NimbusProcess.run(["backup", "--to", backup] + data) }.value
        let acknowledgedBeforeBackupEnded = writes.acknowledgedCount
        stop.set()
        for writer in writers { await writer.value }
        // Another device syncs after the backup: its token is from a future the restore loses.
        let futureToken = try #require(try await Self.fetchAll(client, from: deviceToken).token)
        #expect(taken.contains("1 asset blobs"), "\(taken)")
        #expect(writes.acknowledgedCount > acknowledgedBeforeBackupEnded || acknowledgedBeforeBackupEnded > acknowledgedBeforeBackup.count)

        let verified = try NimbusProcess.run(["backup", "verify", backup])
        #expect(verified.hasPrefix("backup is whole: "), "\(verified)")
        let restoredData = try await NimbusProcess.dataArguments(restored)
        let restoreOutput = try NimbusProcess.run(["restore", backup] + restoredData)
        #expect(restoreOutput.contains("restored the backup"), "\(restoreOutput)")
        server.stop()

        // The restored store serves the same app (its API token), the same signed-in user (their
        // session) and prints the same development token.
        let second = try await NimbusProcess.serve(dataDirectory: restored)
        defer { second.stop() }
        expectEqual(second.output.split(separator: "\n").last, server.output.split(separator: "\n").last)
        let reader = APIClient(
            baseURL: second.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: client.webAuthToken, userRecordName: nil)
        let present = try await Self.presentNames(writes.allAttempted.flatMap { $0 }, reader: reader)
        for batch in acknowledgedBeforeBackup {
            #expect(batch.allSatisfy(present.contains), "a write acknowledged before the backup began is missing: \(batch)")
        }
        for batch in writes.allAttempted {
            let count = batch.filter(present.contains).count
            #expect(count == 0 || count == batch.count, "a torn atomic batch: \(batch) has \(count) of 3")
        }

        // The asset's bytes came along.
        let asset = try #require(try await reader.lookup(zone: "Notes", ["photo"]).records.first?.fieldValue("image"))
        let download = try await AssetTests.http(.GET, try #require(asset["downloadURL"]?.stringValue))
        #expect(download.status == 200 && download.body == photoBytes)

        // The device that synced before the backup fetches on from its token: every record the
        // restored zone holds that it had not seen, and nothing it had.
        let fetched = try await Self.fetchAll(reader, from: deviceToken).names
        expectEqual(fetched, present.subtracting(["photo"]), "changes since the device's token: \(fetched.count), records restored: \(present.count)")

        // Writes after the restore reach both devices, the one whose token is from the lost
        // future too: the restore moved the zone's sequence past every token ever issued.
        let later = (0..<3).map { "after-restore-\($0)" }
        try await expectEqual(reader.modify(zone: "Notes", later.map { Op.create($0) }).status, 200)
        let fromFuture = try await Self.fetchAll(reader, from: futureToken).names
        #expect(fromFuture.isSuperset(of: later), "a device that synced after the backup missed writes after the restore: \(fromFuture)")
        try await expectEqual(Self.fetchAll(reader, from: deviceToken).names, fetched.union(later))
    }

    /// Every page of Notes' changes after `token`: the names and the last token.
    static func fetchAll(_ client: APIClient, from token: String) async throws -> (names: Set<String>, token: String?) {
        var names = Set<String>()
        var token: String? = token
        while true {
            let answer = try await client.zoneChanges("Notes", token: token)
            expectEqual(answer.status, 200, "\(answer.text)")
            let page = try #require(answer.zones.first)
            for record in page["records"]?.arrayValue ?? [] { if let name = record["recordName"]?.stringValue { names.insert(name) } }
            token = page["syncToken"]?.stringValue
            if page["moreComing"] != true { return (names, token) }
        }
    }

    @Test func backupsRefuseToOverwriteAndRestoresRefuseDamagedNewerOrMisplacedBackups() async throws {
        let (dataDirectory, _, _) = try await CrashRecoveryTests.prepareDataDirectory()
        let backup = dataDirectory + "-backup"
        let damaged = dataDirectory + "-damaged"
        let target = dataDirectory + "-target"
        defer { for path in [dataDirectory, backup, damaged, target] { try? FileManager.default.removeItem(atPath: path) } }
        let data = try await NimbusProcess.dataArguments(dataDirectory)
        _ = try NimbusProcess.run(["backup", "--to", backup] + data)
        let manifest = try JSONDecoder().decode(
            BackupManifest.self, from: Data(contentsOf: URL(fileURLWithPath: backup + "/" + BackupManifest.fileName)))
        let storeFile = try #require(manifest.store.files.first)

        let again = try DatabaseOptionTests.failing(["backup", "--to", backup] + data)
        #expect(again.status != 0 && again.error.contains("exists: a backup never overwrites"), "\(again.error)")

        // Into a directory that holds anything: refused, and the directory left as it was.
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: target + "/notes.txt"))
        let occupied = try await DatabaseOptionTests.failing(["restore", backup] + NimbusProcess.dataArguments(target))
        #expect(occupied.status != 0 && occupied.error.contains("is not empty: a restore never overwrites"), "\(occupied.error)")
        try expectEqual(FileManager.default.contentsOfDirectory(atPath: target), ["notes.txt"])
        try FileManager.default.removeItem(atPath: target)

        // A new data directory whose store is one that holds data (the original's): refused.
        let originalStore =
            TestStorage.isSQLiteFile
            ? ["--database", "sqlite:" + dataDirectory + "/nimbus.sqlite"] : Array(data.drop { $0 != "--database" })
        let overStore = try DatabaseOptionTests.failing(["restore", backup, "--data-dir", target] + originalStore)
        #expect(overStore.status != 0 && overStore.error.contains("never overwrites"), "\(overStore.error)")
        #expect(!FileManager.default.fileExists(atPath: target))

        /// A fresh copy of the backup, changed by `damage`; what verify and restore say of it.
        /// `whole`: the damage is one a backup may carry and still be whole (verify passes).
        func refusals(whole: Bool = false, _ damage: (String) throws -> Void) async throws -> (verify: String, restore: String) {
            try? FileManager.default.removeItem(atPath: damaged)
            try FileManager.default.copyItem(atPath: backup, toPath: damaged)
            try damage(damaged)
            let verify = try DatabaseOptionTests.failing(["backup", "verify", damaged])
            expectEqual((verify.status == 0), whole, "\(verify.error)")
            let restore = try await DatabaseOptionTests.failing(["restore", damaged] + NimbusProcess.dataArguments(target))
            #expect(restore.status != 0)
            // A refused restore leaves nothing behind.
            #expect(!FileManager.default.fileExists(atPath: target))
            return (verify.error, restore.error)
        }

        let truncated = try await refusals { path in
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path + "/" + storeFile))
            try handle.truncate(atOffset: UInt64(manifest.files.first { $0.path == storeFile }!.bytes / 2))
            try handle.close()
        }
        #expect(truncated.verify.contains("\(storeFile) has") && truncated.verify.contains("cut short"), "\(truncated.verify)")
        #expect(truncated.restore.contains("cut short"), "\(truncated.restore)")

        let flipped = try await refusals { path in
            var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path + "/" + storeFile)))
            bytes[bytes.count / 2] ^= 0xFF
            try Data(bytes).write(to: URL(fileURLWithPath: path + "/" + storeFile))
        }
        #expect(flipped.verify.contains("does not match its checksum"), "\(flipped.verify)")

        let unfinished = try await refusals { path in try FileManager.default.removeItem(atPath: path + "/" + BackupManifest.fileName) }
        #expect(unfinished.verify.contains("has no manifest.json"), "\(unfinished.verify)")

        /// Writes `edit` of the manifest; `seal` recomputes its checksum, as a real backup's would be.
        func rewrite(_ path: String, seal: Bool = true, _ edit: (inout BackupManifest) -> Void) throws {
            var edited = manifest
            edit(&edited)
            try JSONEncoder().encode(seal ? edited.sealed() : edited).write(to: URL(fileURLWithPath: path + "/" + BackupManifest.fileName))
        }

        let listTampered = try await refusals { path in try rewrite(path, seal: false) { $0.files.removeLast() } }
        #expect(listTampered.verify.contains("manifest.json does not match its checksum"), "\(listTampered.verify)")
        let factTampered = try await refusals { path in try rewrite(path, seal: false) { $0.store.migrations.removeLast() } }
        #expect(factTampered.verify.contains("manifest.json does not match its checksum"), "\(factTampered.verify)")
        let dropped = try await refusals { path in try rewrite(path) { $0.files.removeAll { $0.path == storeFile } } }
        #expect(dropped.verify.contains("names \(storeFile) as part of the store but lists no checksum"), "\(dropped.verify)")

        // Taken by a newer Nimbus: whole, but its schema has a migration this one does not know.
        let newer = try await refusals(whole: true) { path in
            try rewrite(path) {
                $0.store.migrations.append("v999-from-a-later-release")
                $0.nimbusVersion = "9.0.0"
            }
        }
        #expect(newer.restore.contains("taken by Nimbus 9.0.0") && newer.restore.contains("v999-from-a-later-release"), "\(newer.restore)")
        let newerFormat = try await refusals { path in try rewrite(path) { $0.format = BackupManifest.currentFormat + 1 } }
        #expect(newerFormat.verify.contains("reads format \(BackupManifest.currentFormat) and older"), "\(newerFormat.verify)")

        let otherEngine = try await refusals(whole: true) { path in
            try rewrite(path) { $0.store.engine = manifest.store.engine == "sqlite" ? "postgres" : "sqlite" }
        }
        #expect(otherEngine.restore.contains("restore it to the engine it came from"), "\(otherEngine.restore)")

        let notABackup = try DatabaseOptionTests.failing(["backup", "verify", dataDirectory + "-nowhere"])
        #expect(notABackup.status != 0 && notABackup.error.contains("is not a directory"), "\(notABackup.error)")
    }

    /// A backup that fails halfway (here the blob store breaks while its bytes are copied) leaves
    /// nothing under the name asked for, and no partial directory either.
    @Test func aBackupCutShortLeavesNoFileThatLooksComplete() async throws {
        try await TestServer.with { server in
            let blobs = try #require(server.service.options.blobs)
            let alice = try await server.user("alice")
            let file = try await AssetTests.upload(alice, Array("bytes that will not copy".utf8))
            try await expectEqual(alice.modify([AssetTests.photo("p1", file)]).status, 200)
            let parent = NSTemporaryDirectory() + "nimbus-backups-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: parent) }
            let destination = parent + "/tonight"
            await #expect(throws: BlobStoreError.self) {
                try await Backups.take(
                    storage: server.directory.storage, blobs: BreakingBlobStore(inner: blobs), dataDirectory: server.dataDirectory,
                    to: destination)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: parent).isEmpty)

            // The same store backs up whole once the blob store works.
            let manifest = try await Backups.take(
                storage: server.directory.storage, blobs: blobs, dataDirectory: server.dataDirectory, to: destination)
            #expect(manifest.store.blobKeys.count == 1 && manifest.missingBlobs.isEmpty)
            try expectEqual(Backups.verify(destination), manifest)
        }
    }

    /// Which of `names` the server holds in zone Notes.
    static func presentNames(_ names: [String], reader: APIClient) async throws -> Set<String> {
        var present = Set<String>()
        for start in stride(from: 0, to: names.count, by: 200) {
            let lookup = try await reader.lookup(zone: "Notes", Array(names[start..<min(start + 200, names.count)]))
            expectEqual(lookup.status, 200, "\(lookup.text)")
            for record in lookup.records where record.errorCode == nil {
                if let name = record["recordName"]?.stringValue { present.insert(name) }
            }
        }
        let photo = try await reader.lookup(zone: "Notes", ["photo"])
        if photo.records.first?.errorCode == nil { present.insert("photo") }
        return present
    }
}

/// Batches written by several tasks: all attempted, and those acknowledged in order.
private final class AcknowledgedBatches: @unchecked Sendable {
    private let lock = NSLock()
    private var attemptedBatches: [[String]] = []
    private var acknowledgedBatches: [[String]] = []

    func attempted(_ names: [String]) { lock.withLock { attemptedBatches.append(names) } }
    func acknowledged(_ names: [String]) { lock.withLock { acknowledgedBatches.append(names) } }
    var acknowledgedCount: Int { lock.withLock { acknowledgedBatches.count } }
    var acknowledgedSoFar: [[String]] { lock.withLock { acknowledgedBatches } }
    var allAttempted: [[String]] { lock.withLock { attemptedBatches } }
}

private final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}

/// A blob store whose reads fail after the first chunk: a disk or bucket failing mid-backup.
private struct BreakingBlobStore: BlobStore {
    let inner: any BlobStore

    func stage() async throws -> any StagedBlob { try await inner.stage() }
    func stage(resumable name: String) async throws -> any StagedBlob { try await inner.stage(resumable: name) }
    func stagedSize(resumable name: String) async throws -> Int64? { try await inner.stagedSize(resumable: name) }
    func removeStaging(untouchedSince time: Int64) async throws { try await inner.removeStaging(untouchedSince: time) }
    func read(_ key: BlobKey, range: Range<Int64>?, into write: (ByteBuffer) async throws -> Void) async throws {
        try await write(ByteBuffer(bytes: [1, 2, 3]))
        throw BlobStoreError.unavailable("the disk went away")
    }
    func delete(_ key: BlobKey) async throws { try await inner.delete(key) }
    func keys(storedBefore time: Int64) async throws -> [BlobKey] { try await inner.keys(storedBefore: time) }
    var description: String { "breaking " + inner.description }
}

/// The server's own backups (`nimbus serve --backup-dir --backup-every --backup-keep`) and the
/// admin API's view of them.
@Suite struct ScheduledBackupTests {
    @Test func scheduledBackupsRunAndRotateKeepingTheNewest() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        let backups = dataDirectory + "-backups"
        defer { for path in [dataDirectory, backups] { try? FileManager.default.removeItem(atPath: path) } }
        let (server, client) = try await CrashRecoveryTests.serveSignedIn(
            dataDirectory, container: container, apiToken: apiToken, ["--backup-dir", backups, "--backup-every", "1s", "--backup-keep", "2"])
        defer { server.stop() }
        try await expectEqual(client.createZone("Notes").status, 200)
        var seen: [String] = []
        var most = 0
        let deadline = Date().addingTimeInterval(60)
        var written = 0
        while seen.count < 4, Date() < deadline {
            _ = try await client.modify(zone: "Notes", [Op.create("n\(written)")])
            written += 1
            let complete = Self.completeBackups(in: backups)
            most = max(most, complete.count)
            for name in complete where !seen.contains(name) { seen.append(name) }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(seen.count >= 4, "scheduled backups seen in 60 s: \(seen)")
        // A new backup is renamed into place before the oldest is removed (the oldest goes only
        // once the new one is whole): for the moment between, the directory holds keep + 1.
        #expect(most <= 3, "more backups than --backup-keep + 1 at once")
        var settled = false
        for _ in 0..<50 where !settled {
            settled = Self.completeBackups(in: backups).count == 2
            if !settled { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(settled, "the directory never came back to --backup-keep backups")
        server.stop()  // or the backup verified below may be rotated out while it is read
        let now = Self.completeBackups(in: backups)
        #expect(!now.contains(seen[0]) && !now.contains(seen[1]), "the oldest were not removed: \(now)")
        let newest = try #require(now.sorted().last)
        let verified = try NimbusProcess.run(["backup", "verify", backups + "/" + newest])
        #expect(verified.hasPrefix("backup is whole"), "\(verified)")
    }

    @Test func scheduledBackupsGoToABucketRotateAndRestoreFromIt() async throws {
        let moto = try await MotoServer.start()
        defer { moto.stop() }
        let bucket = S3Bucket(moto.location(bucket: "nimbus-backups", prefix: "nightly/"))
        let url = { (name: String) in "s3://testing:testing@127.0.0.1:\(moto.port)/nimbus-backups/nightly\(name)?tls=false" }
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        let restored = dataDirectory + "-restored"
        defer { for path in [dataDirectory, restored] { try? FileManager.default.removeItem(atPath: path) } }
        let (server, client) = try await CrashRecoveryTests.serveSignedIn(
            dataDirectory, container: container, apiToken: apiToken, ["--backup-dir", url(""), "--backup-every", "1s", "--backup-keep", "2"])
        defer { server.stop() }
        try await expectEqual(client.createZone("Notes").status, 200)
        /// The complete backups in the bucket: those whose manifest is there.
        func complete() async throws -> [String] {
            try await bucket.list().compactMap { object in
                object.key.hasSuffix("/manifest.json") ? String(object.key.dropLast("/manifest.json".count)) : nil
            }.sorted()
        }
        var seen: [String] = []
        var most = 0
        var written = 0
        let deadline = Date().addingTimeInterval(60)
        // A backup named (by its start, to the second) two seconds after n0 was written holds
        // n0; one that began earlier and finished later, on a busy machine, may not.
        let nameFormat = DateFormatter()
        nameFormat.dateFormat = "yyyyMMdd-HHmmss"
        nameFormat.timeZone = TimeZone(identifier: "UTC")
        var firstWrite = Date.distantFuture
        func startedAfterFirstWrite(_ name: String) -> Bool {
            guard let prefix = name.range(of: "nimbus-backup-"),
                let started = nameFormat.date(from: String(name[prefix.upperBound...].prefix(15)))
            else { return false }
            return started >= firstWrite.addingTimeInterval(2)
        }
        while seen.count < 3 || !seen.contains(where: startedAfterFirstWrite), Date() < deadline {
            _ = try await client.modify(zone: "Notes", [Op.create("n\(written)")])
            if written == 0 { firstWrite = Date() }
            written += 1
            let names = (try? await complete()) ?? []
            most = max(most, names.count)
            for name in names where !seen.contains(name) { seen.append(name) }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(seen.count >= 3, "backups seen in the bucket in 60 s: \(seen)")
        // A new backup is complete (its manifest uploaded) before the oldest is removed: for
        // the moment between, the bucket holds --backup-keep + 1.
        #expect(most <= 3, "more backups in the bucket than --backup-keep + 1 at once")
        var settled = false
        for _ in 0..<50 where !settled {
            settled = try await complete().count == 2
            if !settled { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(settled, "the bucket never came back to --backup-keep backups")
        // The server takes a backup a second and keeps two: one named now would be rotated
        // out while a slow machine starts the processes below. Stopped, the bucket holds still.
        server.stop()
        let newest = try #require(try await complete().last)
        #expect(startedAfterFirstWrite(newest), "\(newest) began before n0 was written at \(firstWrite)")
        #expect(!(try await complete()).contains(seen[0]), "the oldest was not removed")

        // Verified and restored straight from the bucket; the secret is never printed.
        let newestURL = url("/" + newest)
        let verified = try await Task.detached { try NimbusProcess.run(["backup", "verify", newestURL]) }.value
        #expect(verified.hasPrefix("backup is whole") && !verified.contains("testing:testing"), "\(verified)")
        // A backup taken by hand goes to the bucket too, under a name rotation leaves alone;
        // never over one that is there.
        let data = try await NimbusProcess.dataArguments(dataDirectory)
        let manualURL = url("/before-upgrade")
        let manual = try await Task.detached { try NimbusProcess.run(["backup", "--to", manualURL] + data) }.value
        #expect(manual.contains("s3: ") && !manual.contains("testing:testing"), "\(manual)")
        #expect(try await Task.detached { try NimbusProcess.run(["backup", "verify", manualURL]) }.value.hasPrefix("backup is whole"))
        let again = try DatabaseOptionTests.failing(["backup", "--to", manualURL] + data)
        #expect(again.status != 0 && again.error.contains("never overwrites"), "\(again.error)")

        let restoredData = try await NimbusProcess.dataArguments(restored)
        let output = try await Task.detached { try NimbusProcess.run(["restore", newestURL] + restoredData) }.value
        #expect(output.contains("restored the backup"), "\(output)")
        let second = try await NimbusProcess.serve(dataDirectory: restored)
        defer { second.stop() }
        let reader = APIClient(
            baseURL: second.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: client.webAuthToken, userRecordName: nil)
        let n0 = try await reader.lookup(zone: "Notes", ["n0"])
        #expect(n0.records.first?.errorCode == nil, "\(n0.text)")

        // An upload cut short (objects, no manifest) is neither listed nor restorable.
        try await bucket.put(Array("half".utf8), as: "nimbus-backup-20200101-000000/store/nimbus.sqlite")
        let refused = try DatabaseOptionTests.failing(["backup", "verify", url("/nimbus-backup-20200101-000000")])
        #expect(refused.status != 0 && refused.error.contains("no manifest.json"), "\(refused.error)")
    }

    static func completeBackups(in directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
            $0.hasPrefix("nimbus-backup-") && FileManager.default.fileExists(atPath: "\(directory)/\($0)/manifest.json")
        }.sorted()
    }

    @Test func aFailingScheduledBackupIsVisibleToOperatorsAndLogged() async throws {
        let blocker = NSTemporaryDirectory() + "nimbus-not-a-directory-" + UUID().uuidString
        FileManager.default.createFile(atPath: blocker, contents: Data("a file where backups should go".utf8))
        defer { try? FileManager.default.removeItem(atPath: blocker) }
        let lines = RouterTests.LogLines()
        try await TestServer.with(configure: {
            $0.backups = BackupSettings(directory: blocker + "/backups", every: .milliseconds(50), keep: 2)
            $0.logger = Logger(label: "test") { _ in RouterTests.CapturingHandler(sink: lines) }
        }) { server in
            let browser = try await ConsoleTests.administrator(server)
            var status = try await browser.get("backups")
            let deadline = Date().addingTimeInterval(30)
            while status.json["lastFailure"] == nil, Date() < deadline {
                try await Task.sleep(for: .milliseconds(50))
                status = try await browser.get("backups")
            }
            expectEqual(status.json["configured"], true, "\(status.text)")
            let reason = status.json["lastFailure"]?["reason"]?.stringValue ?? ""
            #expect(reason.contains(blocker), "\(status.text)")
            #expect((status.json["failuresInARow"]?.int64Value ?? 0) >= 1)
            #expect(status.json["lastSuccess"] == nil)
            #expect(lines.all.contains { $0.0 == "backup failed" && "\($0.1["reason"] ?? "")".contains(blocker) }, "no error logged")

            let now = try await browser.post("backups")
            #expect(now.status == 500 && now.reason.hasPrefix("the backup failed: "), "\(now.text)")
        }
    }

    @Test func operatorsTakeABackupNowAndSeeTheList() async throws {
        let backups = NSTemporaryDirectory() + "nimbus-backups-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: backups) }
        try await TestServer.with(configure: { $0.backups = BackupSettings(directory: backups, keep: 3) }) { server in
            let browser = try await ConsoleTests.administrator(server)
            let empty = try await browser.get("backups")
            #expect(empty.status == 200 && empty.json["backups"]?.arrayValue?.isEmpty == true, "\(empty.text)")
            #expect(empty.json["everySeconds"] == nil)

            let taken = try await browser.post("backups")
            expectEqual(taken.status, 200, "\(taken.text)")
            let listed = try #require(taken.json["backups"]?.arrayValue)
            #expect(listed.count == 1 && listed[0]["name"]?.stringValue == taken.json["lastSuccess"]?["name"]?.stringValue)
            let name = try #require(listed[0]["name"]?.stringValue)
            #expect(try Backups.verify(backups + "/" + name).store.engine == (TestStorage.isSQLiteFile ? "sqlite" : "postgres"))
            let audit = try await browser.get("audit")
            expectEqual(audit.json["entries"]?.arrayValue?.contains { $0["action"] == "backup.take" }, true, "\(audit.text)")

            // Without the CSRF token, or as a read-only operator, or one limited to a container: refused.
            try await expectEqual(browser.post("backups", csrf: "wrong").status, 403)
            let (_, password) = try await server.service.createOperator(name: "rhea", role: .readOnly, containers: nil, by: "cli")
            var reader = OperatorTests.Browser(server)
            _ = try await reader.signIn("rhea", password)
            try await expectEqual(reader.get("backups").status, 200)
            try await expectEqual(reader.post("backups").status, 403)
            let (_, limitedPassword) = try await server.service.createOperator(
                name: "lim", role: .administrator, containers: [TestServer.container], by: "cli")
            var limited = OperatorTests.Browser(server)
            _ = try await limited.signIn("lim", limitedPassword)
            try await expectEqual(limited.get("backups").status, 403)
            try await expectEqual(limited.post("backups").status, 403)
            expectEqual(Self.count(backups), 1)
        }
        // A server given no backup directory says so.
        try await TestServer.with { server in
            let browser = try await ConsoleTests.administrator(server)
            try await expectEqual(browser.get("backups").json["configured"], false)
            let refused = try await browser.post("backups")
            #expect(refused.status == 400 && refused.reason.contains("--backup-dir"), "\(refused.text)")
        }
    }

    static func count(_ directory: String) -> Int {
        ScheduledBackupTests.completeBackups(in: directory).count
    }
}

/// `nimbus restore-zone` and `nimbus restore-user` as an operator runs them: processes of their
/// own beside a running server (docs/operations.md, "Time travel"), and `serve`'s refusals of
/// the operations flags.
@Suite struct TimeTravelCommandTests {
    @Test func restoreZonePreviewsThenAppliesBesideARunningServer() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let (server, client) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        defer { server.stop() }
        try await expectEqual(client.createZone("Notes").status, 200)
        let saved = try await client.modify(zone: "Notes", [Op.create("n1", ["title": Op.field("kept")]), Op.create("n2", ["title": Op.field("also")])])
        #expect(saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text)")
        try await Task.sleep(for: .milliseconds(20))
        let moment = Int64(Date().timeIntervalSince1970 * 1000)
        try await Task.sleep(for: .milliseconds(20))
        let tag = try #require(saved.records.first?.changeTag)
        try await expectEqual(client.modify(zone: "Notes", [Op.update("n1", tag: tag, ["title": Op.field("broken")]), Op.forceDelete("n2")]).status, 200)

        let data = try await NimbusProcess.dataArguments(dataDirectory)
        let zone = ["--container", container, "--user", "crash", "--zone", "Notes", "--to", String(moment)]
        let preview = try await Task.detached { try NimbusProcess.run(["restore-zone"] + zone + data) }.value
        #expect(preview.contains("revert") && preview.contains("n1") && preview.contains("restore") && preview.contains("n2"), "\(preview)")
        #expect(preview.contains("2 record(s) would change; nothing was written"), "\(preview)")
        try await expectEqual(client.lookup(zone: "Notes", ["n1"]).records.first?.fieldValue("title")?.stringValue, "broken")

        let applied = try await Task.detached { try NimbusProcess.run(["restore-zone"] + zone + ["--apply"] + data) }.value
        #expect(applied.contains("2 record(s) restored"), "\(applied)")
        // The running server serves what the verb wrote.
        let restored = try await client.lookup(zone: "Notes", ["n1", "n2"]).records.map { $0.fieldValue("title")?.stringValue }
        expectEqual(restored, ["kept", "also"])
        let user = try await Task.detached {
            try NimbusProcess.run(["restore-user", "--container", container, "--user", "crash", "--to", String(moment)] + data)
        }.value
        #expect(user.contains("zone Notes") && user.contains("nothing changed since"), "\(user)")

        // Refusals name what is wrong.
        let future = try DatabaseOptionTests.failing(
            ["restore-zone", "--container", container, "--user", "crash", "--zone", "Notes", "--to", "2999-01-01T00:00:00Z"] + data)
        #expect(future.status != 0 && future.error.contains("in the future"), "\(future.error)")
        let garbled = try DatabaseOptionTests.failing(
            ["restore-zone", "--container", container, "--user", "crash", "--zone", "Notes", "--to", "last tuesday"] + data)
        #expect(garbled.status != 0 && garbled.error.contains("ISO 8601"), "\(garbled.error)")
    }

    @Test func serveRefusesOperationsFlagsThatCannotWork() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-flags-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let data = ["--data-dir", directory]
        for (flags, reason) in [
            (["--port", "8123", "--metrics-port", "8123"], "--metrics-port"),
            (["--backup-every", "6h"], "--backup-dir"),
            (["--backup-dir", directory + "/b", "--backup-every", "soon"], "soon"),
            (["--backup-dir", directory + "/b", "--backup-keep", "0"], "--backup-keep"),
            (["--record-history-days", "-1"], "--record-history-days"),
            (["--record-history-days", "4000"], "--record-history-days"),
        ] {
            let refused = try DatabaseOptionTests.failing(["serve"] + data + flags)
            #expect(refused.status != 0 && refused.error.contains(reason), "serve \(flags): \(refused.status) \(refused.error)")
        }
    }
}
