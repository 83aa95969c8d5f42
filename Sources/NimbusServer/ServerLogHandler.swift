import Logging

/// The server's log lines, as swift-log's `StreamLogHandler` writes them to standard error,
/// with the logger's own metadata set without being formatted.
///
/// Why: `StreamLogHandler` formats its metadata into a string whenever a key is set, and
/// Hummingbird sets one (`hb.request.id`) on the server's logger for every request, whether or
/// not anything is logged at that level: under wrk's fetch by ID that formatting was about 2%
/// of the server's CPU (docs/benchmarks.md). Here the metadata is kept as a dictionary and
/// handed to the stream handler with each line that is written, so a line reads exactly as
/// before and a request that logs nothing formats nothing.
public struct ServerLogHandler: LogHandler {
    private var stream: StreamLogHandler
    public var metadata: Logger.Metadata = [:]

    public init(label: String) {
        self.init(wrapping: StreamLogHandler.standardError(label: label))
    }

    /// Lines written by `stream`, which should carry no metadata of its own (tests: a stream
    /// handler writing to memory).
    init(wrapping stream: StreamLogHandler) {
        self.stream = stream
    }

    public var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { stream.metadataProvider }
        set { stream.metadataProvider = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        // The line's own metadata wins over the logger's, as in `StreamLogHandler`.
        if !metadata.isEmpty { event.metadata = metadata.merging(event.metadata ?? [:]) { _, line in line } }
        stream.log(event: event)
    }
}
