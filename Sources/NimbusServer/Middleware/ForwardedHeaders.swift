import Foundation
import HTTPTypes
import Hummingbird
import NimbusWire

/// This server's public address for URLs it hands out (`webcourierURL`, the sign-in
/// `redirectURL`): the scheme and host a reverse proxy reports (`Forwarded`,
/// `X-Forwarded-Proto`, `X-Forwarded-Host`) when the peer is a configured trusted proxy, else
/// `http://` and the request's own Host. A forwarded header from any other peer is refused:
/// honouring it would let a client choose the URLs the server hands to others. Applied by
/// `EdgeMiddleware`.
struct ForwardedHeaders: Sendable {
    typealias Context = NimbusRequestContext
    /// Peer addresses (exact IPs) whose forwarded headers are believed.
    let trustedProxies: Set<String>

    static let forwarded = HTTPField.Name("Forwarded")!
    static let forwardedProto = HTTPField.Name("X-Forwarded-Proto")!
    static let forwardedHost = HTTPField.Name("X-Forwarded-Host")!
    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!

    /// Notes the forwarded base URL in the request's exchange; throws for an untrusted peer or
    /// an invalid scheme or host.
    func read(_ request: Request, context: Context) throws {
        let headers = request.headers
        let forwarded = headers[Self.forwarded]
        let proto = headers[Self.forwardedProto]
        let forwardedHost = headers[Self.forwardedHost]
        let fields = forwarded.map(Self.parseForwarded) ?? [:]
        if forwarded != nil || proto != nil || forwardedHost != nil {
            var scheme = "http"
            var host = request.head.authority ?? "127.0.0.1"
            guard let peer = context.peerAddress, trustedProxies.contains(peer) else {
                throw CloudKitError.badRequest(
                    "forwarded headers (Forwarded, X-Forwarded-Proto, X-Forwarded-Host) are only accepted from trusted proxies, and \(context.peerAddress ?? "this peer") is not one; start nimbus serve with --trusted-proxy ADDRESS or drop the headers")
            }
            if let value = fields["proto"] ?? proto?.split(separator: ",").first.map(String.init) {
                scheme = value.trimmingCharacters(in: .whitespaces).lowercased()
            }
            if let value = fields["host"] ?? forwardedHost?.split(separator: ",").first.map(String.init) {
                host = value.trimmingCharacters(in: .whitespaces)
            }
            guard scheme == "http" || scheme == "https", Self.isHost(host) else {
                throw CloudKitError.badRequest("the forwarded scheme or host is not valid: '\(Names.escaped(scheme))://\(Names.escaped(host))'")
            }
            context.exchange.update { $0.forwardedBaseURL = "\(scheme)://\(host)" }
        }
        // The client a trusted proxy speaks for (`Forwarded: for=`, else `X-Forwarded-For`'s
        // first address): what limits per client address count. From anyone else the header is
        // not believed, and not refused either: proxies along the way add it unasked.
        if !trustedProxies.isEmpty, let peer = context.peerAddress, trustedProxies.contains(peer) {
            let named = fields["for"] ?? headers[Self.forwardedFor]?.split(separator: ",").first.map(String.init)
            if let client = named.map(Self.address), !client.isEmpty, client.utf8.count <= 64 {
                context.exchange.update { $0.forwardedClient = client }
            }
        }
    }

    /// An address as `for=` or `X-Forwarded-For` write it, without brackets or a port
    /// (`"[2001:db8::1]:4711"`, `192.0.2.1:80`).
    static func address(_ text: String) -> String {
        var value = text.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("["), let close = value.firstIndex(of: "]") {
            value = String(value[value.index(after: value.startIndex)..<close])
        } else if value.filter({ $0 == ":" }).count == 1, let colon = value.firstIndex(of: ":") {
            value = String(value[..<colon])
        }
        return value
    }

    /// The first element of an RFC 7239 `Forwarded` header: `for=…;proto=https;host=x`.
    static func parseForwarded(_ value: String) -> [String: String] {
        let first = value.split(separator: ",").first ?? ""
        var fields: [String: String] = [:]
        for pair in first.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            fields[parts[0].lowercased()] = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
        return fields
    }

    /// A host[:port] with only the ASCII characters a host may have.
    static func isHost(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 255
            && text.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || Array("-.:[]".utf8).contains(byte)
            }
    }
}
