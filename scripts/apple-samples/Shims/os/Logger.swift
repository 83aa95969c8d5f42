import Foundation

/// `os.Logger` as the samples use it: a subsystem and category, one method a level. Lines go
/// to standard error when `NIMBUS_SAMPLE_LOG` is set (the sample logs every event).
public struct Logger: Sendable {
    let prefix: String
    static let enabled = ProcessInfo.processInfo.environment["NIMBUS_SAMPLE_LOG"] != nil

    public init(subsystem: String, category: String) { prefix = "[\(category)]" }

    public func log(_ message: String) { write("log", message) }
    public func debug(_ message: String) { write("debug", message) }
    public func info(_ message: String) { write("info", message) }
    public func notice(_ message: String) { write("notice", message) }
    public func error(_ message: String) { write("error", message) }
    public func fault(_ message: String) { write("fault", message) }

    private func write(_ level: String, _ message: String) {
        guard Self.enabled else { return }
        let time = String(format: "%.3f", Date().timeIntervalSince1970.truncatingRemainder(dividingBy: 1000))
        FileHandle.standardError.write(Data("\(time) \(prefix) \(level): \(message)\n".utf8))
    }
}
