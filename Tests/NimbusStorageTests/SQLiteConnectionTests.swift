import Dispatch
import Foundation
import GRDB
import GRDBSQLite
@testable import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Synchronization
import Testing

/// The SQLite driver's own connections: writers grouped into one transaction, each in a
/// savepoint of its own (`GroupCommitter`), and point reads on connections of their own
/// (`PointReaders`) with GRDB's pool behind them.
@Suite struct SQLiteConnectionTests {
    /// A scratch store, closed and removed after `body`.
    private func withStore(_ body: (SQLiteStorage) async throws -> Void) async throws {
        try await StorageConformanceTests.directory { directory in
            let storage = try SQLiteStorage(path: directory + "/db.sqlite", synchronous: .normal)
            try await withClosing(storage, closedBy: { try await $0.close() }, body)
        }
    }

    /// Runs `writers` writers at once, each through `write(index, tx)` in its own
    /// `writeSQLite`; which of them were told they committed.
    private func commitOutcomes(
        of writers: Int, in storage: SQLiteStorage, _ write: @escaping @Sendable (Int, SQLiteTransaction) throws -> Void
    ) async throws -> [Int: Bool] {
        try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
            for writer in 0..<writers {
                group.addTask {
                    do {
                        try await storage.writeSQLite { tx in try write(writer, tx) }
                        return (writer, true)
                    } catch {
                        return (writer, false)
                    }
                }
            }
            var outcomes: [Int: Bool] = [:]
            for try await (writer, committed) in group { outcomes[writer] = committed }
            return outcomes
        }
    }

    private struct Refused: Error {}

    private func keys(_ storage: SQLiteStorage, prefix: String) throws -> Set<String> {
        try storage.readPoint { tx in
            Set(try tx.fetchRows("SELECT key FROM meta WHERE key LIKE ?", [prefix + "%"]).map { $0[0] as String })
        }
    }

    /// Writers that throw after writing are undone alone; the others of their group commit,
    /// and a writer whose statement fails (a duplicate key) leaves no row of its own either.
    @Test func aWriterThatThrowsIsUndoneAloneAndTheOthersOfItsGroupCommit() async throws {
        try await withStore { storage in
            let outcomes = try await commitOutcomes(of: 120, in: storage) { writer, tx in
                try tx.execute("INSERT INTO meta (key, value) VALUES (?, x'00')", ["writer-\(writer)"])
                try tx.execute("INSERT INTO meta (key, value) VALUES (?, x'00')", ["writer-\(writer)-second"])
                if writer % 3 == 0 { throw Refused() }
                // Its second row again: SQLite refuses the statement, the writer throws.
                if writer % 3 == 1 && writer % 2 == 0 {
                    try tx.execute("INSERT INTO meta (key, value) VALUES (?, x'00')", ["writer-\(writer)-second"])
                }
            }
            let expected = Set((0..<120).filter { $0 % 3 == 2 || ($0 % 3 == 1 && $0 % 2 == 1) })
            expectEqual(Set(outcomes.filter(\.value).keys), expected)
            let stored = try keys(storage, prefix: "writer-")
            expectEqual(stored, Set(expected.flatMap { ["writer-\($0)", "writer-\($0)-second"] }))
            // The writer's connection is out of every savepoint: a later write commits.
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('after', x'00')") }
            expectEqual(try keys(storage, prefix: "after"), ["after"])
        }
    }

    /// A writer that finds the committer idle after groups of one commits on its own thread;
    /// writers arriving behind a commit in flight go to the commit queue, and once a group of
    /// several has committed the next writer does too, until a group of one again. Submitted
    /// from threads of the test's own, so no scheduling of Swift's pool decides who arrives when.
    @Test func aLoneWriterCommitsOnItsOwnThreadAndWritersBehindACommitOnTheQueue() throws {
        try Self.withCommitter(table: "CREATE TABLE t (writer TEXT NOT NULL)") { pool, committer in
            // Whether each writer's work ran on the thread that submitted it (GRDB's writer queue
            // runs a commit on the calling thread, the committer's drain or the writer's own).
            let onOwnThread = Mutex<[String: Bool]>([:])
            let finished = DispatchGroup()
            @Sendable func submit(_ writer: String, holding: DispatchSemaphore? = nil, entered: DispatchSemaphore? = nil) {
                finished.enter()
                let submitter = Thread.current
                committer.submit(
                    GroupCommitter.Job(
                        run: { db in
                            try db.execute(sql: "INSERT INTO t (writer) VALUES (?)", arguments: [writer])
                            onOwnThread.withLock { $0[writer] = Thread.current === submitter }
                            entered?.signal()
                            holding?.wait()
                        },
                        complete: { _ in finished.leave() }))
            }
            submit("lone-1")
            submit("lone-2")
            // One writer holds its commit on a thread of its own while 63 arrive.
            let (hold, entered) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
            Thread { submit("holder", holding: hold, entered: entered) }.start()
            #expect(entered.wait(timeout: .now() + 10) == .success, "the holder never began its commit")
            for writer in 0..<63 { submit("behind-\(writer)") }
            hold.signal()
            #expect(finished.wait(timeout: .now() + 10) == .success, "the writers behind the holder never completed")
            // After a group of several: the next writer goes to the queue, and after its group of one
            // the one after commits on its own thread again.
            submit("after-1")
            #expect(finished.wait(timeout: .now() + 10) == .success)
            // A writer is told before its committer looks for more work: give it that moment.
            Thread.sleep(forTimeInterval: 0.2)
            submit("after-2")
            #expect(finished.wait(timeout: .now() + 10) == .success)
            let seen = onOwnThread.withLock { $0 }
            expectEqual(seen["lone-1"], true)
            expectEqual(seen["lone-2"], true)
            expectEqual(seen["holder"], true)
            expectEqual((0..<63).filter { seen["behind-\($0)"] == false }.count, 63)
            expectEqual(seen["after-1"], false)
            expectEqual(seen["after-2"], true)
            expectEqual(try pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") }, 68)
        }
    }

    /// Writers waiting behind a commit go in groups of at most the committer's bound, in the
    /// order they came, each group one transaction; every writer is told it committed. With
    /// the bound at 4, the ten behind a held commit commit as 4, 4 and 2; unbounded, as one.
    @Test(arguments: [(4, [1, 4, 4, 2]), (GroupCommitter.maximumJobsPerCommit, [1, 10])])
    func writersBehindACommitGoInGroupsOfTheBound(bound: Int, groups: [Int]) throws {
        try Self.withCommitter(table: "CREATE TABLE t (writer INTEGER NOT NULL)", maximumGroup: bound) { pool, committer in
            let commits = CommitCounter()
            try pool.writeWithoutTransaction { db in commits.count(on: db) }
            let finished = DispatchGroup()
            let committed = Mutex<[Int]>([])
            @Sendable func submit(_ writer: Int, holding: DispatchSemaphore? = nil, entered: DispatchSemaphore? = nil) {
                finished.enter()
                committer.submit(
                    GroupCommitter.Job(
                        run: { db in
                            try db.execute(sql: "INSERT INTO t (writer) VALUES (?)", arguments: [writer])
                            commits.ran()
                            entered?.signal()
                            holding?.wait()
                        },
                        complete: { outcome in
                            if case .success = outcome { committed.withLock { $0.append(writer) } }
                            finished.leave()
                        }))
            }
            let (hold, entered) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
            Thread { submit(-1, holding: hold, entered: entered) }.start()
            #expect(entered.wait(timeout: .now() + 10) == .success, "the holder never began its commit")
            for writer in 0..<10 { submit(writer) }
            hold.signal()
            #expect(finished.wait(timeout: .now() + 10) == .success, "the writers behind the holder never completed")
            expectEqual(commits.groups, groups)
            expectEqual(committed.withLock { $0 }.sorted(), Array(-1..<10))
            expectEqual(try pool.read { try Int.fetchAll($0, sql: "SELECT writer FROM t ORDER BY rowid") }, Array(-1..<10))
        }
    }

    /// A store whose commits do not sync bounds its groups at 16 writers; one whose commits
    /// sync keeps the large bound, where each commit's sync is what a group shares.
    @Test(arguments: [(SQLiteStorage.SynchronousMode.normal, 16), (.full, GroupCommitter.maximumJobsPerCommit)])
    func aStoreBoundsItsGroupsByWhetherCommitsSync(synchronous: SQLiteStorage.SynchronousMode, bound: Int) async throws {
        try await StorageConformanceTests.directory { directory in
            let storage = try SQLiteStorage(path: directory + "/db.sqlite", synchronous: synchronous)
            try await withClosing(storage, closedBy: { try await $0.close() }) { storage in
                expectEqual(storage.committer.maximumGroup, bound)
            }
        }
    }

    /// The writers each commit of the writer's connection carried, commit by commit (SQLite's
    /// commit hook, on the writer's thread, after the writers of its transaction ran).
    private final class CommitCounter: @unchecked Sendable {
        private let state = Mutex((ran: 0, groups: [Int]()))
        var groups: [Int] { state.withLock { $0.groups } }
        func ran() { state.withLock { $0.ran += 1 } }
        func count(on db: Database) {
            sqlite3_commit_hook(
                db.sqliteConnection,
                { context in
                    Unmanaged<CommitCounter>.fromOpaque(context!).takeUnretainedValue().state.withLock { state in
                        state.groups.append(state.ran)
                        state.ran = 0
                    }
                    return 0
                }, Unmanaged.passUnretained(self).toOpaque())
        }
    }

    /// A committer over a database of its own in a temporary folder, with the table `table` makes.
    private static func withCommitter(
        table: String, maximumGroup: Int = GroupCommitter.maximumJobsPerCommit, _ body: (DatabasePool, GroupCommitter) throws -> Void
    ) throws {
        let directory = NSTemporaryDirectory() + "nimbus-committer-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pool = try DatabasePool(path: directory + "/db.sqlite")
        try pool.write { try $0.execute(sql: table) }
        try body(pool, GroupCommitter(pool: pool, maximumGroup: maximumGroup))
    }

    /// A writer alone in its commit runs without a savepoint: when it throws after writing, or
    /// a statement of its own fails, it is told its own error and none of its rows stay; a lone
    /// writer that succeeds commits, and the connection is out of every transaction after each.
    @Test func aLoneWriterThatFailsLeavesNothingAndTheNextCommits() throws {
        try Self.withCommitter(table: "CREATE TABLE t (writer TEXT NOT NULL UNIQUE)") { pool, committer in
            /// Submits one writer and waits for its outcome (the committer is idle: it runs inline).
            func alone(_ run: @escaping (Database) throws -> Void) -> Result<Void, any Error> {
                let outcome = Mutex<Result<Void, any Error>?>(nil)
                committer.submit(GroupCommitter.Job(run: run, complete: { result in outcome.withLock { $0 = result } }))
                return outcome.withLock { $0! }
            }
            let refused = alone { db in
                try db.execute(sql: "INSERT INTO t (writer) VALUES ('refused')")
                throw Refused()
            }
            #expect(throws: Refused.self) { try refused.get() }
            let committed = alone { db in try db.execute(sql: "INSERT INTO t (writer) VALUES ('committed')") }
            #expect(throws: Never.self) { try committed.get() }
            // Its first row goes in, its second is the committed writer's again: SQLite refuses it.
            let duplicate = alone { db in
                try db.execute(sql: "INSERT INTO t (writer) VALUES ('duplicate')")
                try db.execute(sql: "INSERT INTO t (writer) VALUES ('committed')")
            }
            #expect(throws: DatabaseError.self) { try duplicate.get() }
            let last = alone { db in try db.execute(sql: "INSERT INTO t (writer) VALUES ('last')") }
            #expect(throws: Never.self) { try last.get() }
            expectEqual(try pool.read { try String.fetchAll($0, sql: "SELECT writer FROM t ORDER BY writer") }, ["committed", "last"])
            expectEqual(try pool.writeWithoutTransaction { $0.isInsideTransaction }, false)
        }
    }

    /// A writer whose statement makes SQLite roll the whole transaction back by itself (an
    /// interrupt during an INSERT does): every writer of its group fails with it, and none that
    /// came after it in the group wrote anything outside the transaction. So a writer is told
    /// it committed exactly when its rows are there.
    @Test func aTransactionSQLiteRolledBackFailsItsWholeGroupAndNothingAfterItCommitsAlone() async throws {
        try await withStore { storage in
            let outcomes = try await commitOutcomes(of: 90, in: storage) { writer, tx in
                guard writer % 30 == 7 else {
                    try tx.execute("INSERT INTO meta (key, value) VALUES (?, x'00')", ["writer-\(writer)"])
                    return
                }
                // Interrupted while the INSERT runs (an interrupt asked between statements does
                // nothing).
                nonisolated(unsafe) let connection = tx.db.sqliteConnection
                tx.db.add(function: DatabaseFunction("interrupt_now", argumentCount: 0, pure: false) { _ in
                    sqlite3_interrupt(connection)
                    return 0
                })
                try tx.execute(
                    "INSERT INTO meta (key, value) SELECT ?, x'00' FROM (SELECT interrupt_now()) UNION ALL SELECT ?, x'00'",
                    ["writer-\(writer)", "writer-\(writer)-second"])
            }
            for interrupted in [7, 37, 67] { expectEqual(outcomes[interrupted], false, "writer \(interrupted)") }
            let committed = Set(outcomes.filter(\.value).keys.map { "writer-\($0)" })
            expectEqual(try keys(storage, prefix: "writer-"), committed)
            // The writer's connection is usable again.
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('after', x'00')") }
            expectEqual(try keys(storage, prefix: "after"), ["after"])
        }
    }

    /// More point reads at once than there are point readers: those past the limit are served
    /// by GRDB's pool, and every read sees what was committed before it began.
    @Test func pointReadsPastTheirConnectionsAreServedAndSeeEveryCommittedWrite() async throws {
        // One more reader than the store keeps point-read connections (its cores plus two),
        // each holding its read open until all are inside at once: at least one can only be
        // served by the pool. (Fewer than GRDB's pool and the point readers hold together.)
        let readers = ProcessInfo.processInfo.activeProcessorCount + 3
        try await withStore { storage in
            for round in 0..<3 {
                try await storage.writeSQLite { tx in
                    try tx.execute("INSERT INTO meta (key, value) VALUES (?, x'00')", ["round-\(round)"])
                }
                let failures = Failures()
                let together = Rendezvous(readers)
                await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                    let reading = DispatchGroup()
                    for _ in 0..<readers {
                        reading.enter()
                        // Threads of their own: a read blocks its thread, and these wait for each other.
                        Thread {
                            do {
                                let seen = try storage.readPoint { tx in
                                    let seen = try tx.fetchRows("SELECT key FROM meta WHERE key LIKE 'round-%'").count
                                    if !together.arrive() { failures.add("\(readers) reads were never inside at once") }
                                    return seen
                                }
                                if seen != round + 1 { failures.add("saw \(seen) rounds of \(round + 1)") }
                            } catch {
                                failures.add("\(error)")
                            }
                            reading.leave()
                        }.start()
                    }
                    reading.notify(queue: .global()) { finished.resume() }
                }
                expectEqual(failures.all, [])
            }
            // A read that throws leaves its connection out of its transaction: the next reads
            // on the same connections see a later write.
            #expect(throws: Refused.self) { try storage.readPoint { _ in throw Refused() } }
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('last', x'00')") }
            for _ in 0..<8 { expectEqual(try keys(storage, prefix: "last"), ["last"]) }
        }
    }

    /// About 2 MB of rows, more than any reader's share of the page budget holds.
    private func fillWithRows(_ storage: SQLiteStorage) async throws {
        try await storage.writeSQLite { tx in
            for row in 0..<2_000 { try tx.execute("INSERT INTO meta (key, value) VALUES (?, randomblob(1000))", ["row-\(row)"]) }
        }
    }

    private static let readEveryRow = "SELECT sum(length(value)) FROM meta"

    /// A memory pass drops the page cache of a point reader no read used since the pass before,
    /// keeps the cache of one a read used, and does not drop a dropped cache again.
    @Test func idlePointReadersGiveBackTheirPageCachesAndUsedOnesKeepThem() async throws {
        try await withStore { storage in
            try await fillWithRows(storage)
            // Two connections, each with every row read: the outer read holds one while the
            // inner takes another.
            let bytes = try storage.readPoint { outer in
                _ = try outer.fetchRow(Self.readEveryRow)
                return try storage.readPoint { inner in try inner.fetchRow(Self.readEveryRow)?[0] as Int? }
            }
            let filled = storage.pointReaderCachedBytes()
            #expect(filled.count == 2)
            #expect(filled.allSatisfy { $0 > 200_000 }, "\(filled)")
            // The first pass only starts the count.
            #expect(storage.pointReaders.releaseIdleCaches() == 0)
            #expect(storage.pointReaderCachedBytes() == filled)
            // One read between passes: it takes the warmest connection, which keeps its cache.
            _ = try storage.readPoint { tx in try tx.fetchRow(Self.readEveryRow) }
            #expect(storage.pointReaders.releaseIdleCaches() == 1)
            let afterOneRead = storage.pointReaderCachedBytes()
            #expect(afterOneRead[0] < 64_000, "\(afterOneRead)")
            #expect(afterOneRead[1] > 200_000, "\(afterOneRead)")
            // No read since: the other goes too; the one already dropped is not dropped again.
            #expect(storage.pointReaders.releaseIdleCaches() == 1)
            #expect(storage.pointReaderCachedBytes().allSatisfy { $0 < 64_000 })
            #expect(storage.pointReaders.releaseIdleCaches() == 0)
            // A dropped cache refills at the next read, which sees every committed row.
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('late', x'00')") }
            #expect(try keys(storage, prefix: "late") == ["late"])
            #expect(try storage.readPoint { tx in try tx.fetchRow(Self.readEveryRow)?[0] as Int? } == bytes.map { $0 + 1 })
        }
    }

    /// A memory pass drops the writer's page cache only when it wrote nothing since the pass
    /// before. The passes go through the driver `nimbus serve` hands its memory pass, as that
    /// finds it (`MemoryReturnService(store:)`).
    @Test func theWritersPageCacheGoesOnlyAfterAPassWithoutWrites() async throws {
        try await withStore { storage in
            let driver: any StorageDriver = UnitOfWorkDriver(storage)
            let memoryPass = try #require(driver as? any IdleMemoryReturning)
            try await fillWithRows(storage)
            let filled = try await storage.writerCachedBytes()
            #expect(filled > 1_000_000)
            await memoryPass.returnIdleMemory()
            #expect(try await storage.writerCachedBytes() >= filled)
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('between', x'00')") }
            await memoryPass.returnIdleMemory()
            #expect(try await storage.writerCachedBytes() >= filled)
            await memoryPass.returnIdleMemory()
            #expect(try await storage.writerCachedBytes() < 64_000)
            // The next write reads what it needs again.
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('after', x'00')") }
            #expect(try keys(storage, prefix: "after") == ["after"])
        }
    }

    /// GRDB's pool readers (the scan lane's) are closed, their caches with them, at a pass
    /// that finds neither them nor the writer used since the pass before; a scan between two
    /// passes keeps them.
    @Test func idlePoolReadersCloseOnceTheWriterIsIdleToo() async throws {
        try await withStore { storage in
            try await fillWithRows(storage)
            let bytes = try await storage.readScan { tx in try tx.fetchRow(Self.readEveryRow)?[0] as Int? }
            #expect(try storage.poolReaderCachedBytes() > 200_000)
            await storage.returnIdleMemory()  // starts the counts
            _ = try await storage.readScan { tx in try tx.fetchRow(Self.readEveryRow)?[0] as Int? }
            await storage.returnIdleMemory()  // the writer was idle, the pool was not
            #expect(try storage.poolReaderCachedBytes() > 200_000)
            await storage.returnIdleMemory()  // both idle
            #expect(try storage.poolReaderCachedBytes() < 64_000)
            // The next scan opens a reader again and sees every committed row.
            try await storage.writeSQLite { tx in try tx.execute("INSERT INTO meta (key, value) VALUES ('late', x'00')") }
            #expect(try await storage.readScan { tx in try tx.fetchRow(Self.readEveryRow)?[0] as Int? } == bytes.map { $0 + 1 })
        }
    }

    /// A statement that takes far more than a scan's quick try (`SQLiteStorage.quickTryAllowance`):
    /// counting to three million, some hundreds of milliseconds.
    private static let slowCount = (
        sql: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) FROM c",
        result: 3_000_000)

    /// A statement of some thousands of SQLite's steps (the progress handler's checks come every
    /// 2,000) that takes about a millisecond.
    private static let someWork = (
        sql: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) SELECT count(*) FROM c",
        result: 20_000)

    private static func count(_ source: any UnitRowSource, _ sql: String) throws -> Int {
        // A point read's source wraps the transaction (`LateSnapshot`).
        let tx = try #require((source as? LateSnapshot)?.transaction ?? source as? SQLiteTransaction)
        return try #require(try tx.fetchRow(sql)?[0] as Int?)
    }

    /// A scan that takes little is served on the calling thread: with every lane slot held by a
    /// scan that waits, it is answered anyway (on the lane it would wait for them).
    @Test func aScanThatTakesLittleIsAnsweredWhileTheScanLaneIsFull() async throws {
        try await withStore { storage in
            let width = storage.scans.width
            let inside = LockedCounter()
            let release = DispatchSemaphore(value: 0)
            let holders = (0..<width).map { _ in
                Task { try await storage.readScan { _ in inside.increment(); release.wait() } }
            }
            let released = LockedCounter()
            func releaseHolders() {
                guard released.increment() == 1 else { return }
                for _ in 0..<width { release.signal() }
            }
            // Should the cheap scan wait for the lane after all, the holders let go after 20 s
            // and the check below fails instead of the test hanging.
            let fallback = Task {
                try? await Task.sleep(for: .seconds(20))
                releaseHolders()
            }
            for _ in 0..<2_000 where inside.value < width { try await Task.sleep(for: .milliseconds(10)) }
            expectEqual(inside.value, width, "the holders never all held the lane")
            let seen = try await storage.withRowSource(.scan) { source in try Self.count(source, "SELECT count(*) FROM meta") }
            expectEqual(released.value, 0, "the scan was answered only after the lane was let go")
            #expect(seen != nil)
            releaseHolders()
            fallback.cancel()
            for holder in holders { try await holder.value }
        }
    }

    /// A scan past its quick try is stopped and run on the lane, and only the lane's run
    /// answers: past the processor allowance, also when the stopped try caught the interruption
    /// itself and returned, and past the wall allowance (a scan that waited, as for the disk).
    @Test func aScanPastItsQuickTryRunsAgainOnTheLaneAndOnlyThatRunAnswers() async throws {
        enum Slow: String, CaseIterable { case working, swallowingTheInterruption, waiting }
        try await withStore { storage in
            for slow in Slow.allCases {
                let runs = LockedCounter()
                let answer = try await storage.withRowSource(.scan) { source -> Int in
                    runs.increment()
                    switch slow {
                    case .working: return try Self.count(source, Self.slowCount.sql)
                    case .swallowingTheInterruption: return (try? Self.count(source, Self.slowCount.sql)) ?? -1
                    case .waiting:
                        // Past the wall allowance without using the processor, then a statement
                        // long enough for SQLite to look at the clock.
                        Thread.sleep(forTimeInterval: 2 * Double(SQLiteStorage.quickTryWallAllowance.wholeNanoseconds) / 1e9)
                        return try Self.count(source, Self.someWork.sql)
                    }
                }
                expectEqual(answer, slow == .waiting ? Self.someWork.result : Self.slowCount.result, "\(slow)")
                expectEqual(runs.value, 2, "\(slow)")
            }
            // The connections are usable afterwards, with no deadline left on them.
            let again = try await storage.withRowSource(.point) { source in try Self.count(source, Self.slowCount.sql) }
            expectEqual(again, Self.slowCount.result)
        }
    }

    /// Scans that take long hold only the lane's threads: with more of them running than the
    /// machine has cores, point reads still run (on Swift's cooperative threads, which a scan
    /// kept there would park). Each scan works in SQLite until the test lets it go, which it
    /// does only after the point reads finished, so a driver that kept scans on the calling
    /// thread past their quick try would hang (the time limit fails the test).
    @Test(.timeLimit(.minutes(1))) func longScansLeavePointReadsFree() async throws {
        try await withStore { storage in
            let release = DispatchSemaphore(value: 0)
            let started = AsyncStream<Void>.makeStream()
            let finished = LockedCounter()
            let scanCount = 2 * ProcessInfo.processInfo.activeProcessorCount + 2
            let scans = (0..<scanCount).map { _ in
                Task {
                    try await storage.withRowSource(.scan) { source -> Int in
                        started.continuation.yield()
                        // Bounded: were the point reads held up, the test fails instead of
                        // holding these threads for good.
                        let deadline = Date().addingTimeInterval(10)
                        while release.wait(timeout: .now()) == .timedOut, Date() < deadline {
                            _ = try Self.count(source, Self.someWork.sql)
                        }
                        finished.increment()
                        return 1
                    }
                }
            }
            // Every scan has started (its quick try, at least): on the calling threads alone,
            // the later ones would start only once earlier ones gave up waiting.
            var iterator = started.stream.makeAsyncIterator()
            for _ in 0..<scanCount { _ = await iterator.next() }
            for _ in 0..<50 {
                let meta = try await storage.withRowSource(.point) { source in try Self.count(source, "SELECT count(*) FROM meta") }
                #expect(meta != nil)
            }
            expectEqual(finished.value, 0, "scans ended before the point reads ran: they held the threads")
            for _ in 0..<scanCount { release.signal() }
            for scan in scans { expectEqual(try await scan.value, 1) }
        }
    }

    /// Whether `body` failed with `StorageError.queryTooExpensive` (which is not `Equatable`).
    private static func tooExpensive(_ body: () async throws -> Void) async -> Bool {
        do {
            try await body()
            return false
        } catch StorageError.queryTooExpensive {
            return true
        } catch {
            return false
        }
    }

    /// A query's own budget (`ScanBudget.run`) fails it with `queryTooExpensive` in the quick
    /// try, without a second run on the lane, and on the lane as before.
    @Test func aQuerysOwnBudgetFailsItInTheQuickTryAndOnTheLane() async throws {
        try await withStore { storage in
            let runs = LockedCounter()
            let inQuickTry = await Self.tooExpensive {
                _ = try await storage.withRowSource(.scan) { source -> Int in
                    runs.increment()
                    // A point read's source wraps the transaction (`LateSnapshot`).
        let tx = try #require((source as? LateSnapshot)?.transaction ?? source as? SQLiteTransaction)
                    return try ScanBudget.run(tx, budget: .microseconds(1)) { try Self.count(tx, Self.slowCount.sql) }
                }
            }
            #expect(inQuickTry)
            expectEqual(runs.value, 1)
            let onTheLane = await Self.tooExpensive {
                _ = try await storage.readScan { tx in
                    try ScanBudget.run(tx, budget: .microseconds(1)) { try Self.count(tx, Self.slowCount.sql) }
                }
            }
            #expect(onTheLane)
        }
    }

    /// A processor-time deadline reads the processor clock at its first check: the wall time
    /// since it was set counts as used then, and later checks go by the processor clock alone.
    @Test func aProcessorDeadlineCountsFromWhenItWasSet() {
        var deadline = ScanBudget.ProcessorDeadline(.milliseconds(5))
        let wall = ScanBudget.monotonicNanoseconds()
        // First checked a millisecond (of wall time) after it was set: about 4 ms left.
        let first = deadline.passed(processor: 100_000_000, wall: wall + 1_000_000)
        let before = deadline.passed(processor: 103_500_000, wall: wall + 60_000_000)
        let after = deadline.passed(processor: 104_100_000, wall: wall + 60_000_000)
        #expect(!first && !before && after)
        // Set long before its first check (a thread that waited for a core): already over.
        var late = ScanBudget.ProcessorDeadline(.milliseconds(5))
        let lateFirst = late.passed(processor: 100_000_000, wall: ScanBudget.monotonicNanoseconds() + 6_000_000)
        #expect(lateFirst)
        var none = ScanBudget.ProcessorDeadline.none
        let never = none.passed(processor: .max - 1, wall: .max - 1)
        #expect(!never)
    }
}

/// Threads that wait for each other: `arrive` returns true once `count` have arrived, or false
/// after 20 seconds without them (they never were all there at once).
private final class Rendezvous: @unchecked Sendable {
    private let condition = NSCondition()
    private let count: Int
    private var arrived = 0

    init(_ count: Int) { self.count = count }

    func arrive() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        arrived += 1
        if arrived >= count {
            condition.broadcast()
            return true
        }
        let deadline = Date().addingTimeInterval(20)
        while arrived < count {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }
}

/// What the reading threads saw wrong, gathered across them.
private final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var found: [String] = []
    func add(_ failure: String) { lock.withLock { found.append(failure) } }
    var all: [String] { lock.withLock { found } }
}
