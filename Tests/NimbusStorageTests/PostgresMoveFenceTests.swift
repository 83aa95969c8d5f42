import Foundation
import NimbusStorage
import NimbusTestSupport
import PostgresNIO
import Synchronization
import Testing

@testable import NimbusPostgres

/// The fence of a move between partitions (docs/scale-out.md, "Moving a user"): it waits for
/// a write holding the database's row, refuses a write decided before it as that write
/// commits, refuses new writes as they are decided, and leaves reads alone until the switch
/// makes the row a pointer.
@Suite(.enabled(if: PostgresTestCluster.url != nil, "needs the test cluster"))
struct PostgresMoveFenceTests {
    @Test func aFenceWaitsForWritesInFlightAndRefusesWritesDecidedBeforeIt() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 4)
            let coarse = PostgresCoarseStorage(storage)
            let driver = UnitOfWorkDriver(coarse)
            do {
                let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)
                let other = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 8)
                let id = try await driver.write(in: key) { try $0.ensureDatabase(key).id }
                _ = try await driver.write(in: other) { try $0.ensureDatabase(other) }

                // A unit decided before the fence (what it writes matters not: every database a
                // unit writes in is in `databasesWritten`).
                var decided = UnitOfWorkChanges()
                decided.writes = [.appendOutbox(databaseID: id, body: [1], createdAt: 1)]
                decided.databasesWritten = [id]
                try await coarse.apply(decided)

                // The fence waits for a write that holds the row (as every apply does at its end).
                let holder = try await PostgresTestCluster.connect(to: location, id: 9, logger: storage.logger)
                try await holder.query("BEGIN", logger: storage.logger)
                try await holder.query("SELECT 1 FROM databases WHERE id = \(id) FOR KEY SHARE", logger: storage.logger)
                let fence = Task { try await storage.fence(key, movingTo: "p9") }
                try await Task.sleep(for: .milliseconds(300))
                let fencedEarly = try await PostgresTestCluster.rows("SELECT moving_to FROM databases WHERE id = \(id)", on: location)
                expectEqual(fencedEarly.first?.first ?? nil, nil, "the fence went ahead of a write holding the row")
                try await holder.query("COMMIT", logger: storage.logger)
                try await holder.close()
                try await fence.value

                // Decided before the fence, applied after it: refused as it commits, so the
                // unit is decided again (and then refused for the fence it sees).
                await #expect {
                    try await coarse.apply(decided)
                } throws: { error in
                    if case StorageError.serializationFailure(let detail) = error { return detail.contains("is being moved") }
                    return false
                }
                let entries = try await PostgresTestCluster.rows("SELECT count(*)::text FROM change_outbox", on: location)
                expectEqual(entries.first?.first, "1", "only the entry from before the fence")

                // Decided after it: refused as it is decided, saying why; reads go on, and other
                // databases are written as ever.
                await #expect {
                    try await driver.write(in: key) { tx in _ = try tx.createZone(databaseID: try tx.ensureDatabase(key).id, name: "Album") }
                } throws: { error in
                    if case StorageError.moving(let detail) = error { return detail.contains("partition 'p9'") }
                    return false
                }
                try await expectEqual(driver.read(.point, in: key) { try $0.database(key)?.relocation }, .fenced(to: "p9"))
                _ = try await driver.write(in: other) { tx in try tx.createZone(databaseID: try tx.ensureDatabase(other).id, name: "Album") }

                // After the switch the row is a pointer: reads are refused too.
                try await storage.markMoved(key)
                await #expect {
                    try await driver.read(.point, in: key) { try $0.database(key) }
                } throws: { error in
                    if case StorageError.moving(let detail) = error { return detail.contains("lives on partition 'p9' now") }
                    return false
                }
            } catch {
                await storage.close()
                throw error
            }
            await storage.close()
        }
    }

    /// A database made for a user while their move runs is moved too: the command passes over
    /// the user's databases again until a pass finds none elsewhere (here the database is made
    /// on another partition just after the first one's move ended, when no move of theirs is
    /// recorded and a node places it as any new one).
    @Test func aDatabaseMadeForTheUserWhileTheMoveRunsIsMovedToo() async throws {
        try await PostgresTestCluster.withDatabase { homeLocation in
            try await PostgresTestCluster.withDatabase { secondLocation in
                try await PostgresTestCluster.withDatabase { thirdLocation in
                    let home = try await PostgresStorage(homeLocation, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
                    let second = try await PostgresStorage(secondLocation, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
                    let third = try await PostgresStorage(thirdLocation, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
                    do {
                        let catalog = home.partitionCatalog
                        _ = try await catalog.addChecked(name: "p2", url: secondLocation.description, at: 1)
                        _ = try await catalog.addChecked(name: "p3", url: thirdLocation.description, at: 2)
                        let onSecond = UnitOfWorkDriver(PostgresCoarseStorage(second))
                        let privateKey = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)
                        let sharedKey = DatabaseKey(container: "c", environment: .development, scope: .shared, ownerID: 7)
                        try await expectEqual(catalog.place(privateKey, on: "p2"), "p2")
                        _ = try await onSecond.write(in: privateKey) { tx in try tx.createZone(databaseID: try tx.ensureDatabase(privateKey).id, name: "Album") }

                        let made = Mutex(false)
                        let stores: @Sendable (String) async throws -> PostgresStorage = { name in
                            switch name {
                            case "p2": second
                            case "p3": third
                            default: home
                            }
                        }
                        let move = PartitionMove(
                            home: home, settle: .milliseconds(10),
                            stepped: { step in
                                guard step == .clean, !made.withLock({ let was = $0; $0 = true; return was }) else { return }
                                _ = try? await catalog.place(sharedKey, on: "p2")
                                _ = try? await onSecond.write(in: sharedKey) { try $0.ensureDatabase(sharedKey) }
                            }, store: stores)
                        let moved = try await move.moveUser(7, to: "p3")
                        expectEqual(moved.map(\.database.scope), [.private, .shared])
                        try await expectEqual(catalog.placement(of: privateKey), "p3")
                        try await expectEqual(catalog.placement(of: sharedKey), "p3", "the database made meanwhile stayed behind")
                    } catch {
                        await third.close()
                        await second.close()
                        await home.close()
                        throw error
                    }
                    await third.close()
                    await second.close()
                    await home.close()
                }
            }
        }
    }
}
