import Foundation
import Logging
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// `nimbus serve`'s log handler writes what swift-log's `StreamLogHandler` writes, line for
/// line, while setting the logger's metadata formats nothing.
@Suite struct ServerLogHandlerTests {
    /// Lines written to memory.
    private final class Lines: TextOutputStream, @unchecked Sendable {
        private let lock = NSLock()
        private var text = ""
        func write(_ string: String) { lock.withLock { text += string } }
        /// Each line without its timestamp (the first word), which differs between two runs.
        var withoutTimestamps: [String] {
            lock.withLock { text }.split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).dropFirst().joined() }
        }
    }

    /// The same calls on a logger: metadata set and replaced on the logger, lines with and
    /// without metadata of their own (one overriding a logger key), one below the level.
    private func exercise(_ logger: inout Logger) {
        logger.logLevel = .info
        logger.info("plain")
        logger[metadataKey: "hb.request.id"] = "1"
        logger[metadataKey: "hb.request.id"] = "2"
        logger[metadataKey: "node"] = "a"
        logger.info("with the logger's metadata")
        logger.warning("with its own", metadata: ["route": "/health", "node": "b"])
        logger.debug("below the level")
        logger[metadataKey: "node"] = nil
        logger.error("one key left", metadata: ["status": "500"])
    }

    @Test func linesAreStreamLogHandlersLineForLine() {
        let expected = Lines()
        var reference = Logger(label: "nimbus") { StreamLogHandler(label: $0, stream: expected, metadataProvider: nil) }
        exercise(&reference)
        let written = Lines()
        var server = Logger(label: "nimbus") {
            ServerLogHandler(wrapping: StreamLogHandler(label: $0, stream: written, metadataProvider: nil))
        }
        exercise(&server)
        expectEqual(written.withoutTimestamps.count, 4)
        expectEqual(written.withoutTimestamps, expected.withoutTimestamps)
    }
}
