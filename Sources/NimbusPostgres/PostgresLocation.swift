import Foundation
import Logging
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL server is, from a `postgres://` URL (`--database`, `NIMBUS_DATABASE`):
/// `postgres://USER[:PASSWORD]@HOST[:PORT][,HOST[:PORT]…]/DATABASE[?sslmode=…&target_session_attrs=…]`.
/// Left out: user `postgres`, host 127.0.0.1, port 5432, database named as the user, sslmode
/// `prefer`, target_session_attrs `any` (as libpq). Anything else in the URL is refused with a
/// one-line reason rather than ignored, so a typo never connects somewhere unintended.
///
/// Several hosts are libpq's form for a primary and its standbys: a node connects to the first
/// host, in the order written, that has the session attributes asked for, and after a failover
/// finds the new one by the same rule (`PostgresPrimary`).
public struct PostgresLocation: Sendable, CustomStringConvertible {
    public enum TLSMode: String, Sendable { case disable, prefer, require }

    /// Which of the hosts a node may use (libpq's `target_session_attrs`): `any` takes the first
    /// that answers; `read-write` the first that accepts writes (not in recovery, and
    /// `default_transaction_read_only` off); `primary` the first not in recovery. The read-only
    /// forms are for read replicas, which this URL does not name.
    public enum SessionAttributes: String, Sendable { case any, readWrite = "read-write", primary }

    /// One host of the URL.
    public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// The hosts, in the order the URL names them (at least one).
    public var endpoints: [Endpoint]
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode
    public var sessionAttributes: SessionAttributes

    /// The first host: the only one, for a URL that names one.
    public var host: String { endpoints[0].host }
    public var port: Int { endpoints[0].port }

    /// Whether a node has to find its server among the hosts, and find it again when the one it
    /// uses stops serving: several hosts, or one that must be a primary.
    public var followsPrimary: Bool { endpoints.count > 1 || sessionAttributes != .any }

    /// A URL Nimbus cannot use, with what is wrong with it.
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public init(url text: String) throws {
        // URLComponents reads one host; libpq's list (`h1:5432,h2:5433`) is split here and the
        // rest of the URL parsed with a placeholder host in its place.
        guard let schemeEnd = text.range(of: "://") else {
            throw Invalid(description: "'\(Self.redacted(text))' is not a postgres://USER@HOST:PORT/DATABASE URL")
        }
        let afterScheme = text[schemeEnd.upperBound...]
        let authority = afterScheme.prefix { $0 != "/" && $0 != "?" }
        let userInfo = authority.lastIndex(of: "@").map { authority[..<$0] + "@" } ?? ""
        let hostList = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
        let placeholder = text[..<schemeEnd.upperBound] + userInfo + (hostList.isEmpty ? "" : "placeholder")
            + afterScheme[authority.endIndex...]
        guard let components = URLComponents(string: String(placeholder)), let scheme = components.scheme?.lowercased(),
            scheme == "postgres" || scheme == "postgresql"
        else { throw Invalid(description: "'\(Self.redacted(text))' is not a postgres://USER@HOST:PORT/DATABASE URL") }
        guard !hostList.isEmpty else {
            throw Invalid(description: "\(scheme):// URL names no host; write postgres://USER@HOST:PORT/DATABASE")
        }
        endpoints = try hostList.split(separator: ",", omittingEmptySubsequences: false).map { try Self.endpoint(String($0)) }
        guard Set(endpoints).count == endpoints.count else {
            throw Invalid(description: "the URL names a host twice (\(hostList))")
        }
        user = components.user.flatMap { $0.removingPercentEncoding ?? $0 } ?? "postgres"
        password = components.password.flatMap { $0.removingPercentEncoding ?? $0 }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !path.contains("/") else { throw Invalid(description: "database name '\(path)' contains '/'") }
        database = path.isEmpty ? user : (path.removingPercentEncoding ?? path)
        tls = .prefer
        sessionAttributes = .any
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw Invalid(description: "sslmode '\(item.value ?? "")' is not one of disable, prefer, require")
                }
                tls = mode
            case "target_session_attrs":
                guard let attributes = item.value.flatMap(SessionAttributes.init(rawValue:)) else {
                    throw Invalid(
                        description: "target_session_attrs '\(item.value ?? "")' is not one of any, read-write, primary "
                            + "(a node writes through this URL; the read-only forms are for read replicas)")
                }
                sessionAttributes = attributes
            default:
                throw Invalid(description: "URL parameter '\(item.name)' is not one Nimbus knows (sslmode, target_session_attrs)")
            }
        }
    }

    /// `HOST[:PORT]` or `[IPv6][:PORT]`, one entry of the host list.
    private static func endpoint(_ text: String) throws -> Endpoint {
        var host = text
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw Invalid(description: "host '\(text)' has no closing ']'") }
            host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw Invalid(description: "host '\(text)' has text after its ']'") }
                portText = rest.dropFirst()
            }
        } else if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty else { throw Invalid(description: "the host list names an empty host ('\(text)')") }
        var port = 5432
        if let portText {
            guard let number = Int(portText) else { throw Invalid(description: "port '\(portText)' is not a number") }
            port = number
        }
        guard (1...65_535).contains(port) else { throw Invalid(description: "port \(port) is out of range") }
        return Endpoint(host: host.removingPercentEncoding ?? host, port: port)
    }

    /// The URL without its password: what logs and start-up lines may show, and what
    /// PostgreSQL's own programs (pg_dump, pg_restore) take, several hosts included.
    public var description: String {
        let attributes = sessionAttributes == .any ? "" : "&target_session_attrs=\(sessionAttributes.rawValue)"
        return "postgres://\(user)@\(endpoints.map(\.description).joined(separator: ","))/\(database)?sslmode=\(tls.rawValue)\(attributes)"
    }

    private static func redacted(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@"), let scheme = text.range(of: "://") else { return text }
        return text[..<scheme.upperBound] + "…" + text[at...]
    }

    /// One connection of its own to one host (the signal listener's, which holds it for good;
    /// a probe for the primary).
    func connectionConfiguration(to endpoint: Endpoint) throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch self.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: endpoint.host, port: endpoint.port, username: user, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(2)
        configuration.options.additionalStartupParameters = [Self.applicationName]
        return configuration
    }

    /// A pool's configuration for one host.
    func clientConfiguration(to endpoint: Endpoint) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch self.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(.makeClientConfiguration())
        case .require: tls = .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(
            host: endpoint.host, port: endpoint.port, username: user, password: password, database: database, tls: tls)
        // A refused connection should fail the request in about a second, not after the
        // default ten: `PostgresStorage.deadline` bounds the whole unit of work anyway.
        configuration.options.connectTimeout = .seconds(2)
        configuration.options.additionalStartupParameters = [Self.applicationName]
        return configuration
    }

    /// Every connection a node opens names itself `nimbus` (PostgreSQL's `application_name`):
    /// an operator tells Nimbus's sessions from others in `pg_stat_activity` and in the server's
    /// log (`%a` in `log_line_prefix`), and the statement-routing check (scripts/statement-routes.py)
    /// reads the server's statements only, not those a test or a person sent.
    static let applicationName = ("application_name", "nimbus")

    /// Runs `body` on a connection of its own to one host, closed afterwards (a probe, a check).
    func withConnection<Value>(
        to endpoint: Endpoint, logger: Logger, _ body: (PostgresConnection) async throws -> Value
    ) async throws -> Value {
        let connection = try await PostgresConnection.connect(configuration: try connectionConfiguration(to: endpoint), id: 2, logger: logger)
        do {
            let value = try await body(connection)
            try? await connection.close()
            return value
        } catch {
            try? await connection.close()
            throw error
        }
    }
}
