import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs another program (python3, a browser driver) to its end.
///
/// - Not on Swift's cooperative pool: on two cores that pool has two threads, and a test
///   blocked waiting for a program there starves every server in the process, the one the
///   program talks to included. The waiting happens on a thread of its own.
/// - Not with Foundation's `Process`: its launch crashed (a memcpy overrunning a buffer of
///   file-descriptor numbers) once the test process held some 1,300 descriptors, which the
///   whole suite's servers do. `posix_spawn` is called directly.
public enum ExternalProcess {
    private static let launching = NSLock()

    /// Starts a Foundation `Process` (the tests that keep a handle on a `nimbus serve` they
    /// kill), one launch at a time.
    public static func launch(_ process: Process) throws {
        try launching.withLock { try process.run() }
    }

    /// Runs `arguments` through `/usr/bin/env` with `input` on its standard input; returns its
    /// exit status and standard output.
    public static func run(_ arguments: [String], input: [UInt8]? = nil) async throws -> (status: Int32, output: [UInt8]) {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                do {
                    continuation.resume(returning: try spawnAndWait(arguments, input: input))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.start()
        }
    }

    private static func spawnAndWait(_ arguments: [String], input: [UInt8]?) throws -> (status: Int32, output: [UInt8]) {
        var stdinPipe: [Int32] = [0, 0]
        var stdoutPipe: [Int32] = [0, 0]
        guard pipe(&stdinPipe) == 0 else { throw TestFailure("pipe failed: \(errno)") }
        guard pipe(&stdoutPipe) == 0 else {
            close(stdinPipe[0])
            close(stdinPipe[1])
            throw TestFailure("pipe failed: \(errno)")
        }
        for descriptor in stdinPipe + stdoutPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // The copies on 0 and 1 lose close-on-exec; the pipes' own ends close at exec.
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
        let argv: [UnsafeMutablePointer<CChar>?] = (["/usr/bin/env"] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/usr/bin/env", &actions, nil, argv, environ)
        close(stdinPipe[0])
        close(stdoutPipe[1])
        guard spawned == 0 else {
            close(stdinPipe[1])
            close(stdoutPipe[0])
            throw TestFailure("posix_spawn \(arguments.first ?? "") failed: \(spawned)")
        }
        if let input {
            input.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = write(stdinPipe[1], bytes.baseAddress! + offset, bytes.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
        }
        close(stdinPipe[1])
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(stdoutPipe[0], &buffer, buffer.count)
            if count > 0 {
                output += buffer[0..<count]
            } else if count < 0, errno == EINTR {
                continue
            } else {
                break
            }
        }
        close(stdoutPipe[0])
        var waitStatus: Int32 = 0
        while waitpid(pid, &waitStatus, 0) == -1, errno == EINTR {}
        let exited = (waitStatus & 0x7f) == 0
        return (exited ? (waitStatus >> 8) & 0xff : 128 + (waitStatus & 0x7f), output)
    }
}
