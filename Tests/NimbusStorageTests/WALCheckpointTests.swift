import Foundation
import GRDB
@testable import NimbusSQLite
import NimbusStorage
import Testing

/// The write-ahead log is copied back by the background checkpointer, not by the writer's
/// commits, and it stays bounded while writes go on.
@Suite struct WALCheckpointTests {
    @Test func theLogIsCheckpointedInTheBackgroundAndStartedOverWhileWritesGoOn() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-wal-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/db.sqlite"
        let pages: Int32 = 64
        let storage = try SQLiteStorage(path: path, synchronous: .normal, checkpointPages: pages)
        // About four pages a write (a database row, its default zone, their indexes): the log
        // passes the threshold many times over.
        for owner in 1...600 {
            let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: Int64(owner))
            _ = try await UnitOfWorkDriver(storage).write { try $0.ensureDatabase(key) }
        }
        storage.checkpointer.drain()
        // How many checkpoints 600 quick writes get depends on how often the checkpointer's
        // thread runs (while one copies, growth asks for nothing more): under the whole
        // suite's load it was 2 once. At least one has run by now, whatever the load.
        let figures = storage.checkpointer.figures
        #expect(figures.lastFailure == nil)
        #expect(figures.completed >= 1, "background checkpoints: \(figures.completed)")

        // Writes the checkpointer keeps up with (each waits for it): a checkpoint every
        // `pages` of log, about every 16 writes, so 160 writes get at least 5 whatever the
        // load. With the writer's own automatic checkpoint left on, none would run here.
        let before = storage.checkpointer.figures.completed
        for owner in 1_001...1_160 {
            storage.checkpointer.drain()
            let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: Int64(owner))
            _ = try await UnitOfWorkDriver(storage).write { try $0.ensureDatabase(key) }
        }
        storage.checkpointer.drain()
        let paced = storage.checkpointer.figures.completed - before
        #expect(paced >= 5, "background checkpoints of paced writes: \(paced)")

        // A few more writes, each once the checkpointer has caught up: under the whole suite's
        // load its thread can fall behind 600 quick writes (the log then held 1,183 and 2,017
        // frames when they ended), but it never stays behind once writes pause.
        for owner in 601...604 {
            storage.checkpointer.drain()
            let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: Int64(owner))
            _ = try await UnitOfWorkDriver(storage).write { try $0.ensureDatabase(key) }
        }

        // The last write may have started a background checkpoint: two checkpoints of one file
        // cannot run at once, and the second is refused at once ("database is locked").
        storage.checkpointer.drain()
        // Another connection finds the log short: it was started over behind the checkpoints.
        // (With no checkpoint at all, the writer's hook having turned SQLite's own off, it would
        // hold every write's frames, about 2,400.)
        let other = try DatabaseQueue(path: path)
        let log = try await other.writeWithoutTransaction { try $0.checkpoint(.passive) }
        #expect(log.walFrameCount < Int(pages) * 8, "frames in the log: \(log.walFrameCount)")
        try other.close()
        try await storage.close()

        // Everything written is in the file.
        let reopened = try SQLiteStorage(path: path, synchronous: .normal)
        let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 600)
        #expect(try await UnitOfWorkDriver(reopened).read { try $0.database(key) } != nil)
        try await reopened.close()
    }
}
