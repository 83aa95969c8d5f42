import Foundation

/// Runs another program (python3, a browser driver) to its end without holding a thread of
/// Swift's cooperative pool: on two cores that pool has two threads, and a test blocked in
/// `waitUntilExit` there starves every server in the process, the one the program talks to
/// included. The waiting happens on a thread of its own.
public enum ExternalProcess {
    private static let launching = NSLock()

    /// Starts `process`, one launch at a time in this test process: Foundation's `Process.run`
    /// crashed (a memcpy in its launch) when tests on several threads launched at once. Every
    /// test that starts a program goes through here.
    public static func launch(_ process: Process) throws {
        try launching.withLock { try process.run() }
    }

    public static func run(_ arguments: [String], input: [UInt8]? = nil) async throws -> (status: Int32, output: [UInt8]) {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                process.arguments = arguments
                let stdout = Pipe()
                let stdin = Pipe()
                process.standardOutput = stdout
                process.standardInput = stdin
                do {
                    try launch(process)
                    if let input { stdin.fileHandleForWriting.write(Data(input)) }
                    try stdin.fileHandleForWriting.close()
                    let output = stdout.fileHandleForReading.readDataToEndOfFile()
                    process.waitUntilExit()
                    continuation.resume(returning: (process.terminationStatus, Array(output)))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.start()
        }
    }
}
