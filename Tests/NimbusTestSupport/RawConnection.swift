import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A plain TCP connection to a loopback port, for sending bytes no HTTP client would send
/// (malformed request lines, unfinished header blocks) and seeing exactly what comes back.
public final class RawConnection: @unchecked Sendable {
    private let socket: Int32

    public init(port: Int) throws {
        #if canImport(Glibc)
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        socket = Darwin.socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard socket >= 0 else { throw TestFailure("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(socket)
            throw TestFailure("connect() to port \(port) failed")
        }
    }

    deinit { close(socket) }

    /// Ends the connection from this side (both directions), as a client that went away does.
    public func hangUp() { _ = shutdown(socket, Int32(SHUT_RDWR)) }

    /// Ends this side's sending only (half closure): the client still reads the answer.
    public func finishSending() { _ = shutdown(socket, Int32(SHUT_WR)) }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
            guard written > 0 else { throw TestFailure("write() failed") }
            offset += written
        }
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Sends as much of `bytes` as the server takes before it closes the connection (no
    /// SIGPIPE); returns how many it took. A client that sends its whole body before reading.
    public func sendUntilClosed(_ bytes: [UInt8]) -> Int {
        var offset = 0
        while offset < bytes.count {
            #if canImport(Glibc)
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            #else
            let written = bytes[offset...].withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
            #endif
            guard written > 0 else { break }
            offset += written
        }
        return offset
    }

    /// Sends `chunk` over and over, without waiting on a full socket, for `seconds` or until
    /// `limit` bytes are sent; returns how many the kernel took. A server that has stopped
    /// reading takes only what the two sides' socket buffers hold.
    public func sendWithoutWaiting(_ chunk: [UInt8], upTo limit: Int, for seconds: Double) -> Int {
        let deadline = Date().addingTimeInterval(seconds)
        var sent = 0
        while sent < limit, Date() < deadline {
            let count = min(chunk.count, limit - sent)
            #if canImport(Glibc)
            let written = chunk.withUnsafeBytes { Glibc.send(socket, $0.baseAddress, count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            #else
            let written = chunk.withUnsafeBytes { Darwin.send(socket, $0.baseAddress, count, MSG_DONTWAIT) }
            #endif
            if written > 0 {
                sent += written
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                usleep(10_000)
            } else {
                break
            }
        }
        return sent
    }

    /// What the server sends until it closes the connection or `seconds` pass.
    public struct Received: Sendable {
        public let bytes: [UInt8]
        /// The server closed the connection (rather than the wait running out).
        public let closed: Bool
        public let seconds: Double

        public var text: String { String(decoding: bytes, as: UTF8.self) }
        /// The status code of the first response, if one came.
        public var status: Int? {
            let line = text.split(separator: "\r\n").first ?? ""
            let parts = line.split(separator: " ")
            return parts.count >= 2 && parts[0].hasPrefix("HTTP/1.") ? Int(parts[1]) : nil
        }
        /// The body of the first response (after its header block).
        public var body: String {
            guard let range = text.range(of: "\r\n\r\n") else { return "" }
            return String(text[range.upperBound...])
        }
    }

    /// Waits on a thread of its own: the server under test runs in this process, and a
    /// blocking read on one of Swift's few cooperative threads would stall it.
    /// Returns when the server closes, when `enough` says the bytes so far will do, or after
    /// `seconds`, whichever comes first.
    public func receive(waitingUpTo seconds: Double, until enough: @escaping @Sendable ([UInt8]) -> Bool = { _ in false }) async
        -> Received
    {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: self.blockingReceive(waitingUpTo: seconds, until: enough)) }
            thread.start()
        }
    }

    /// The head and body of one answer whose length the head states (`Content-Length`).
    public static let oneAnswer: @Sendable ([UInt8]) -> Bool = { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return false }
        let length = text[..<end.lowerBound].split(separator: "\r\n")
            .first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        return text[end.upperBound...].utf8.count >= length
    }

    private func blockingReceive(waitingUpTo seconds: Double, until enough: ([UInt8]) -> Bool) -> Received {
        let start = Date()
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let left = seconds - Date().timeIntervalSince(start)
            guard left > 0 else { return Received(bytes: bytes, closed: false, seconds: Date().timeIntervalSince(start)) }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(left * 1000))
            if ready <= 0 { continue }
            let count = buffer.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
            if count <= 0 { return Received(bytes: bytes, closed: true, seconds: Date().timeIntervalSince(start)) }
            bytes += buffer[0..<count]
            if enough(bytes) { return Received(bytes: bytes, closed: false, seconds: Date().timeIntervalSince(start)) }
        }
    }
}
