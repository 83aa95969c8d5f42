import Foundation
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL server is, from a `postgres://` URL (`--database`, `NIMBUS_DATABASE`):
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require]`.
/// Left out: user `postgres`, host 127.0.0.1, port 5432, database named as the user, sslmode
/// `prefer` (as libpq). Anything else in the URL is refused with a one-line reason rather than
/// ignored, so a typo never connects somewhere unintended.
public struct PostgresLocation: Sendable, CustomStringConvertible {
    public enum TLSMode: String, Sendable { case disable, prefer, require }

    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    /// A URL Nimbus cannot use, with what is wrong with it.
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public init(url text: String) throws {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "postgres" || scheme == "postgresql"
        else { throw Invalid(description: "'\(Self.redacted(text))' is not a postgres://USER@HOST:PORT/DATABASE URL") }
        guard let host = components.host, !host.isEmpty else {
            throw Invalid(description: "\(scheme):// URL names no host; write postgres://USER@HOST:PORT/DATABASE")
        }
        self.host = host
        port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw Invalid(description: "port \(port) is out of range") }
        user = components.user.flatMap { $0.removingPercentEncoding ?? $0 } ?? "postgres"
        password = components.password.flatMap { $0.removingPercentEncoding ?? $0 }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !path.contains("/") else { throw Invalid(description: "database name '\(path)' contains '/'") }
        database = path.isEmpty ? user : (path.removingPercentEncoding ?? path)
        tls = .prefer
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw Invalid(description: "sslmode '\(item.value ?? "")' is not one of disable, prefer, require")
                }
                tls = mode
            default:
                throw Invalid(description: "URL parameter '\(item.name)' is not one Nimbus knows (only sslmode)")
            }
        }
    }

    /// The URL without its password: what logs and start-up lines may show.
    public var description: String { "postgres://\(user)@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)" }

    private static func redacted(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@"), let scheme = text.range(of: "://") else { return text }
        return text[..<scheme.upperBound] + "…" + text[at...]
    }

    /// One connection of its own (the signal listener's, which holds it for good).
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch self.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(2)
        return configuration
    }

    var clientConfiguration: PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch self.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(.makeClientConfiguration())
        case .require: tls = .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: tls)
        // A refused connection should fail the request in about a second, not after the
        // default ten: `PostgresStorage.deadline` bounds the whole unit of work anyway.
        configuration.options.connectTimeout = .seconds(2)
        return configuration
    }
}
