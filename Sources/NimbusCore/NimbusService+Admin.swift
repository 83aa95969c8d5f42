import NimbusStorage
import NimbusWire

/// What operators do to containers through the admin API (docs/dashboard.md): each call checks
/// the operator may, does it with the same service calls the CLI uses, and writes the audit log.
extension NimbusService {
    /// The containers the operator may see.
    public func containers(visibleTo context: OperatorContext) async throws -> [ContainerRow] {
        try await containers().filter { context.account.maySee(container: $0.id) }
    }

    public func createContainer(_ id: String, as context: OperatorContext) async throws {
        try context.requireChange()
        try context.requireEveryContainer()
        try await createContainer(id: id)
        try await audit(context.account.name, "containers.create", container: id, "container \(id)")
    }

    /// A new API token, returned once; the log names its environment and origins, never the token.
    public func createAPIToken(
        container: String, environment: Environment, allowedOrigins: [String], signInCallback: String?, name: String?,
        as context: OperatorContext
    ) async throws -> String {
        try context.requireChange(container: container)
        let token = try await createAPIToken(
            container: container, environment: environment, allowedOrigins: allowedOrigins, signInCallback: signInCallback, name: name)
        try await audit(
            context.account.name, "tokens.create", container: container,
            "\(environment.rawValue) token\(name.map { " '\($0)'" } ?? "") for origins \(allowedOrigins.joined(separator: ", "))\(signInCallback.map { ", sign-in callback \($0)" } ?? "")")
        return token
    }

    public func apiTokens(container: String, as context: OperatorContext) async throws -> [APITokenRow] {
        try context.requireSight(of: container)
        return try await apiTokens(container: container)
    }

    public func revokeAPIToken(container: String, id: String, as context: OperatorContext) async throws -> APITokenRow {
        try context.requireChange(container: container)
        let token = try await revokeAPIToken(container: container, id: id)
        try await audit(
            context.account.name, "tokens.revoke", container: container,
            "\(token.environment.rawValue) token \(token.id)\(token.name.map { " '\($0)'" } ?? "") revoked")
        return token
    }

    public func revokeAPITokens(container: String, environment: Environment?, as context: OperatorContext) async throws -> Int {
        try context.requireChange(container: container)
        let count = try await revokeAPITokens(container: container, environment: environment)
        try await audit(
            context.account.name, "tokens.revoke", container: container,
            "\(count) \(environment?.rawValue ?? "development and production") token\(count == 1 ? "" : "s") revoked")
        return count
    }

    public func serverKeys(container: String, as context: OperatorContext) async throws -> [ServerKeyRow] {
        try context.requireSight(of: container)
        return try await serverKeys(container: container)
    }

    public func addServerKey(container: String, environment: Environment, publicKeyPEM: String, as context: OperatorContext)
        async throws -> ServerKeyRow
    {
        try context.requireChange(container: container)
        let row = try await addServerKey(container: container, environment: environment, publicKeyPEM: publicKeyPEM)
        try await audit(context.account.name, "keys.add", container: container, "\(environment.rawValue) server-to-server key \(row.keyID)")
        return row
    }

    /// Revokes a key of `container` (a key of another container is not found here).
    public func revokeServerKey(id: String, container: String, as context: OperatorContext) async throws {
        try context.requireChange(container: container)
        guard try await serverKeys(container: container).contains(where: { $0.keyID == id && !$0.isRevoked }) else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' has no server-to-server key '\(Names.escaped(id))' that is not revoked already")
        }
        try await revokeServerKey(id: id)
        try await audit(context.account.name, "keys.revoke", container: container, "server-to-server key \(id)")
    }
}
