import Foundation
import GRDB
import NimbusSQLite
import Testing

/// A transaction's WAL frames reach the file in one write (`CNimbusSQLite/wal_coalescing.c`),
/// and before anyone can see them: every commit is visible to other connections at once and is
/// in the files on disk the moment it returns.
@Suite struct WALCoalescingTests {
    /// A store's writer connection, its database and WAL in a fresh folder.
    struct Store {
        let directory: String
        let path: String
        let writer: DatabasePool

        init(cachePages: Int? = nil) throws {
            SQLiteProcessSettings.apply()
            directory = NSTemporaryDirectory() + "nimbus-wal-coalescing-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            path = directory + "/db.sqlite"
            var configuration = Configuration()
            configuration.prepareDatabase { db in
                // Off: a checkpoint would start the log over and hide what each commit wrote.
                try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
                // A small page cache makes a large transaction write frames before its commit.
                if let cachePages { try db.execute(sql: "PRAGMA cache_size = \(cachePages)") }
            }
            writer = try DatabasePool(path: path, configuration: configuration)
            try writer.write { db in
                try db.execute(sql: "CREATE TABLE item (id INTEGER PRIMARY KEY, body BLOB NOT NULL, tag TEXT NOT NULL)")
                try db.execute(sql: "CREATE INDEX item_by_tag ON item (tag)")
            }
        }

        func insert(_ ids: ClosedRange<Int>, _ db: Database) throws {
            for id in ids {
                try db.execute(
                    sql: "INSERT INTO item (id, body, tag) VALUES (?, randomblob(3000), ?)", arguments: [id, "tag-\(id % 97)"])
            }
        }

        func counts() throws -> (asked: Int, made: Int)? {
            try writer.writeWithoutTransaction { db in db.sqliteConnection.flatMap(SQLiteProcessSettings.walWriteCounts) }
        }

        /// Rows and integrity as a connection of its own sees them.
        static func rows(at path: String) throws -> (count: Int, integrity: String) {
            let reader = try DatabaseQueue(path: path)
            defer { try? reader.close() }
            return try reader.read { db in
                (try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? -1,
                 try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "")
            }
        }

        /// The database and its WAL as they lie on disk now, copied elsewhere while the writer
        /// stays open: what a machine that lost power at this moment would find.
        func copyOnDisk() throws -> String {
            let copy = directory + "/copy-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
            for suffix in ["", "-wal"] {
                try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + "/db.sqlite" + suffix)
            }
            return copy + "/db.sqlite"
        }

        func remove() {
            try? writer.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    @Test func aCommitsFramesGoOutInOneWriteAndAreSeenAtOnce() throws {
        let store = try Store()
        defer { store.remove() }
        #expect(SQLiteProcessSettings.coalescesWALWrites)
        let before = try #require(try store.counts(), "the writer's WAL is not one whose writes are gathered")
        let commits = 40
        for commit in 0..<commits {
            // Eight rows of 3,000 bytes: eight table pages or more, and the index's, a commit.
            let first = commit * 8 + 1
            try store.writer.write { db in try store.insert(first...(first + 7), db) }
            let seen = try Store.rows(at: store.path)
            #expect(seen.count == first + 7, "commit \(commit): another connection saw \(seen.count) rows")
            // In the file on disk too, not only in this process's memory.
            #expect(try Store.rows(at: try store.copyOnDisk()).count == first + 7)
        }
        let after = try #require(try store.counts())
        let asked = after.asked - before.asked
        let made = after.made - before.made
        // Two writes a frame asked (its header, its page), at least nine frames a commit; one
        // write made a commit.
        #expect(asked >= commits * 18, "writes asked: \(asked)")
        #expect(made == commits, "writes made: \(made) for \(commits) commits (\(asked) asked)")
        #expect(try Store.rows(at: store.path).integrity == "ok")
    }

    @Test func largeTransactionsAndOnesRolledBackAfterSpillingLeaveASoundLog() throws {
        // A page cache of 16 pages: a transaction's frames go to the log long before its commit.
        let store = try Store(cachePages: 16)
        defer { store.remove() }
        // About 2.4 MB of rows in one transaction: many times the 120 KiB the VFS gathers at most.
        try store.writer.write { db in try store.insert(1...800, db) }
        // Frames written, then the transaction rolled back: they lie past the last commit.
        struct Abandon: Error {}
        #expect(throws: Abandon.self) {
            try store.writer.write { db in
                try store.insert(801...1_200, db)
                throw Abandon()
            }
        }
        try store.writer.write { db in try store.insert(801...810, db) }
        // Another rolled back, with nothing after it but a small commit.
        #expect(throws: Abandon.self) {
            try store.writer.write { db in
                try store.insert(2_000...2_300, db)
                throw Abandon()
            }
        }
        try store.writer.write { db in try store.insert(811...811, db) }

        let seen = try Store.rows(at: store.path)
        #expect(seen.count == 811)
        #expect(seen.integrity == "ok")
        // What is on disk recovers to the same rows: SQLite rebuilds its index of the log from
        // the copied file and keeps every committed frame, and no rolled-back one.
        let onDisk = try Store.rows(at: try store.copyOnDisk())
        #expect(onDisk.count == 811)
        #expect(onDisk.integrity == "ok")
    }
}
