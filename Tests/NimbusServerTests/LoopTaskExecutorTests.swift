import NIOCore
import NIOPosix
import Testing

@testable import NimbusServer

/// `LoopTaskExecutor`: which requests run straight through on their loop, and that a task
/// preferring the executor stays on the loop across its awaits.
@Suite struct LoopTaskExecutorTests {
    @Test func aTaskPreferringTheExecutorRunsOnTheLoopAtEveryAwait() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let executor = LoopTaskExecutor.of(loop)
        let onLoop = await Task(executorPreference: executor) {
            var onLoop: [Bool] = []
            for _ in 0..<3 {
                await Self.somewhereNonisolated()
                onLoop.append(loop.inEventLoop)
            }
            return onLoop
        }.value
        #expect(onLoop == [true, true, true])
        try await group.shutdownGracefully()
    }

    @Test func onlyALoneRequestOnItsOwnLoopRunsStraightThrough() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let executor = LoopTaskExecutor.of(loop)
        #expect(LoopTaskExecutor.of(loop) === executor)
        #expect(LoopTaskExecutor.of(group.next()) !== executor)
        let straight = { try await loop.submit { executor.runsStraightThrough }.get() }

        executor.requestRead()
        #expect(try await straight())
        #expect(!executor.runsStraightThrough)  // a task off the loop (Swift's pool) runs as it is
        executor.requestRead()
        #expect(try await !straight())  // two in flight: both go with the loop's other work

        // Each answer counts its request out, whichever way it ran.
        await executor.answer {}
        #expect(try await straight())
        let ranOnLoop = await Task(executorPreference: executor) {
            await executor.answer {
                await Self.somewhereNonisolated()
                return loop.inEventLoop
            }
        }.value
        #expect(ranOnLoop)
        #expect(try await !straight())  // none in flight
        executor.requestRead()
        #expect(try await straight())
        await executor.answer {}
        try await group.shutdownGracefully()
    }

    /// A nonisolated async function: entering it switches to the generic executor.
    private nonisolated static func somewhereNonisolated() async {
        await Task.yield()
    }
}
