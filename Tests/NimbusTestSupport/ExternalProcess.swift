import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Another program the tests start: `nimbus` itself, python3, openssl, moto.
///
/// Not Foundation's `Process`: its launch crashed (a memcpy overrunning a buffer of
/// file-descriptor numbers) once the test process held some 1,300 descriptors, which the whole
/// suite's servers do, and a crash there cost a CI run its whole time budget. `posix_spawn` is
/// called directly, and every descriptor above standard error is closed in the child.
///
/// The child is reaped on a thread of its own (never on Swift's cooperative pool, which has two
/// threads on two cores), so `isRunning` is exact and `waitUntilExit` only waits for that thread.
public final class ChildProcess: @unchecked Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// To `/dev/null`.
        case discard
        /// To a pipe the test reads (or, for standard input, writes).
        case pipe
        /// Shared with the test process.
        case inherit
    }

    public let processIdentifier: pid_t
    /// The test's end of the child's standard input, when it is `.pipe`.
    public let standardInput: FileHandle?
    /// The test's end of the child's standard output, when it is `.pipe`.
    public let standardOutput: FileHandle?
    /// The test's end of the child's standard error, when it is `.pipe`.
    public let standardError: FileHandle?

    private let exit = NSCondition()
    /// The raw `waitpid` status, once the child has been reaped.
    private var waitStatus: Int32?

    /// Starts `executable` (a path) with `arguments`. The environment defaults to the test
    /// process's own.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, workingDirectory: String? = nil,
        input: Stream = .discard, output: Stream = .discard, error: Stream = .inherit
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Each pipe end the test keeps; the child's ends are closed here once it has them.
        var childEnds: [Int32] = []
        var testEnds: [Int32?] = []
        defer { childEnds.forEach { close($0) } }
        for (descriptor, stream) in [(Int32(0), input), (1, output), (2, error)] {
            switch stream {
            case .inherit:
                testEnds.append(nil)
            case .discard:
                posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
                testEnds.append(nil)
            case .pipe:
                var ends: [Int32] = [0, 0]
                guard pipe(&ends) == 0 else {
                    testEnds.compactMap { $0 }.forEach { close($0) }
                    throw TestFailure("pipe failed: \(errno)")
                }
                // (pipe2 with O_CLOEXEC is another _GNU_SOURCE declaration; a child another
                // thread spawns in between still closes these through closefrom.)
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                let (childEnd, testEnd) = descriptor == 0 ? (ends[0], ends[1]) : (ends[1], ends[0])
                childEnds.append(childEnd)
                testEnds.append(testEnd)
                // The copy on 0, 1 or 2 loses close-on-exec; the pipe's own ends close at exec.
                posix_spawn_file_actions_adddup2(&actions, childEnd, descriptor)
            }
        }
        Self.closeFrom(3, &actions)
        if let workingDirectory { try Self.changeDirectory(workingDirectory, &actions) }
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let variables = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let envp: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard spawned == 0 else {
            testEnds.compactMap { $0 }.forEach { close($0) }
            throw TestFailure("could not start \(executable): \(String(cString: strerror(spawned)))")
        }
        let child = pid
        processIdentifier = child
        standardInput = testEnds[0].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        standardOutput = testEnds[1].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        standardError = testEnds[2].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        let reaper = Thread { [exit] in
            var status: Int32 = 0
            while waitpid(child, &status, 0) == -1, errno == EINTR {}
            exit.withLock {
                self.waitStatus = status
                exit.broadcast()
            }
        }
        reaper.name = "reaper-\(child)"
        reaper.start()
    }

    /// Runs `arguments` through `/usr/bin/env` (found on PATH).
    public convenience init(
        env arguments: [String], input: Stream = .discard, output: Stream = .discard, error: Stream = .inherit
    ) throws {
        try self.init("/usr/bin/env", arguments, input: input, output: output, error: error)
    }

    public var isRunning: Bool { exit.withLock { waitStatus == nil } }

    /// Asks it to stop (SIGTERM).
    public func terminate() { if isRunning { Glibc.kill(processIdentifier, SIGTERM) } }

    /// Stops it at once (SIGKILL).
    public func kill() { if isRunning { Glibc.kill(processIdentifier, SIGKILL) } }

    /// Blocks the calling thread until the child has ended.
    public func waitUntilExit() {
        exit.withLock {
            while waitStatus == nil { exit.wait() }
        }
    }

    /// Whether it ended by returning from main or calling exit (not by a signal).
    public var exitedNormally: Bool {
        waitUntilExit()
        return exit.withLock { (waitStatus! & 0x7f) == 0 }
    }

    /// Its exit status, or 128 plus the signal that ended it.
    public var terminationStatus: Int32 {
        waitUntilExit()
        let status = exit.withLock { waitStatus! }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    // glibc has both actions since 2.34 (closefrom) and 2.29 (chdir), but declares them only
    // under _GNU_SOURCE, which Swift's Glibc module does not set; they are looked up by name.
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    private static let closeFromAction: CloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }
    private static let changeDirectoryAction: ChangeDirectory? = dlsym(nil, "posix_spawn_file_actions_addchdir_np")
        .map { unsafeBitCast($0, to: ChangeDirectory.self) }

    /// The test process's sockets and files stay out of the child. Without the action (an older
    /// glibc) the child still gets none of the descriptors opened close-on-exec, which is all
    /// of NIO's and SQLite's.
    private static func closeFrom(_ first: Int32, _ actions: inout posix_spawn_file_actions_t) {
        _ = closeFromAction?(&actions, first)
    }

    private static func changeDirectory(_ path: String, _ actions: inout posix_spawn_file_actions_t) throws {
        guard let changeDirectoryAction else { throw TestFailure("this glibc cannot start a program in another directory") }
        _ = path.withCString { changeDirectoryAction(&actions, $0) }
    }
}

/// Runs another program (python3, a browser driver) to its end.
///
/// Not on Swift's cooperative pool: on two cores that pool has two threads, and a test blocked
/// waiting for a program there starves every server in the process, the one the program talks
/// to included. The waiting happens on a thread of its own.
public enum ExternalProcess {
    /// Runs `arguments` through `/usr/bin/env` with `input` on its standard input; returns its
    /// exit status and standard output.
    public static func run(_ arguments: [String], input: [UInt8]? = nil) async throws -> (status: Int32, output: [UInt8]) {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                do {
                    let child = try ChildProcess(env: arguments, input: .pipe, output: .pipe)
                    if let input { child.standardInput!.write(Data(input)) }
                    try child.standardInput!.close()
                    let output = child.standardOutput!.readDataToEndOfFile()
                    continuation.resume(returning: (child.terminationStatus, [UInt8](output)))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.start()
        }
    }
}
