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

    /// A container's settings as the dashboard shows them: sign-up, discovery, and every budget
    /// and quota with its effective value (the container's, or the server's default).
    public func containerSettings(container: String, as context: OperatorContext) async throws -> (ContainerSettings, EffectiveLimits) {
        try context.requireSight(of: container)
        try await requireContainer(container)
        let settings = try await settings(container: container)
        return (settings, effectiveLimits(settings))
    }

    /// Changes what is given, with the command line's checks (`nimbus containers set`,
    /// `nimbus limits set`, `nimbus quotas set`): a limit by name to a number, or nil for the
    /// server's default. One write: all of it or, refused, none. Audited as one line naming each change.
    public func changeContainerSettings(
        container: String, signUp: Bool?, userDiscovery: Bool?, limits: [String: Int64?], as context: OperatorContext
    ) async throws {
        try context.requireChange(container: container)
        var changes: [ContainerLimit: Int64?] = [:]
        for (name, value) in limits {
            guard let limit = ContainerLimit(rawValue: name) else {
                throw CloudKitError.badRequest(
                    "limits: '\(Names.escaped(name))' is no budget or quota; use \(ContainerLimit.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            changes[limit] = value
        }
        try Self.checkLimits(changes)
        try await changeSettings(container: container) { settings in
            Self.apply(changes, to: &settings)
            if let signUp { settings.signUp = signUp }
            if let userDiscovery { settings.userDiscovery = userDiscovery }
        }
        var said = changes.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) \($0.value.map(String.init) ?? "default")" }
        if let signUp { said.append("sign-up \(signUp ? "on" : "off")") }
        if let userDiscovery { said.append("user discovery \(userDiscovery ? "on" : "off")") }
        try await audit(context.account.name, "containers.settings", container: container, said.isEmpty ? "nothing changed" : said.joined(separator: "; "))
    }

    /// An app user's account made by an operator (`nimbus users create`): accounts serve every
    /// container, so only an administrator of every container makes them or resets their passwords.
    public func createUser(name: String, password: String, emailAddress: String?, as context: OperatorContext) async throws -> UserRow {
        try context.requireChange()
        try context.requireEveryContainer()
        let row = try await createUser(name: name, password: password, profile: UserProfile(emailAddress: emailAddress))
        try await audit(context.account.name, "users.create", container: nil, "user \(name)\(emailAddress.map { ", \($0)" } ?? "")")
        return row
    }

    /// Sets an app user's password and signs them out on every device (`nimbus users passwd`).
    public func setUserPassword(name: String, password: String, as context: OperatorContext) async throws {
        try context.requireChange()
        try context.requireEveryContainer()
        try await setUserPassword(name: name, password: password)
        try await audit(context.account.name, "users.password", container: nil, "user \(name): password set, signed out everywhere")
    }

    // MARK: Push credentials and identity providers (the settings page; `nimbus apns`, `nimbus providers`)

    /// The container's APNs credentials (the key itself stays on the server) and the issuers it trusts.
    public func pushAndSignIn(container: String, as context: OperatorContext) async throws
        -> (apns: APNsCredentialsRow?, providers: [IdentityProviderRow])
    {
        try context.requireSight(of: container)
        try await requireContainer(container)
        return (try await apnsCredentials(container: container), try await identityProviders(container: container))
    }

    public func setAPNsCredentials(
        container: String, teamID: String, keyID: String, topic: String, privateKeyPEM: String, as context: OperatorContext
    ) async throws {
        try context.requireChange(container: container)
        try await setAPNsCredentials(container: container, teamID: teamID, keyID: keyID, topic: topic, privateKeyPEM: privateKeyPEM)
        try await audit(context.account.name, "apns.set", container: container, "APNs key \(keyID) of team \(teamID), topic \(topic)")
    }

    public func removeAPNsCredentials(container: String, as context: OperatorContext) async throws {
        try context.requireChange(container: container)
        guard try await removeAPNsCredentials(container: container) else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' has no APNs credentials to remove")
        }
        try await audit(context.account.name, "apns.remove", container: container, "APNs credentials removed; pushes to APNs stop")
    }

    /// Trusts an issuer, as `nimbus providers add` does, except that its keys must be at an
    /// http(s) URL: a path would let an operator of one container make the server read any file
    /// of its host (and say what failed), which only someone at the host may do.
    public func addIdentityProvider(container: String, issuer: String, audience: String, jwks: String, as context: OperatorContext)
        async throws
    {
        try context.requireChange(container: container)
        guard jwks.hasPrefix("https://") || jwks.hasPrefix("http://") else {
            throw CloudKitError.badRequest(
                "jwks: the issuer's keys as an http(s) URL, such as https://appleid.apple.com/auth/keys (a file on the host: `nimbus providers add` there)")
        }
        try await addIdentityProvider(container: container, issuer: issuer, audience: audience, jwks: jwks)
        try await audit(context.account.name, "providers.add", container: container, "issuer \(issuer) for audience \(audience), keys at \(jwks)")
    }

    public func removeIdentityProvider(container: String, issuer: String, as context: OperatorContext) async throws {
        try context.requireChange(container: container)
        try await removeIdentityProvider(container: container, issuer: issuer)
        try await audit(context.account.name, "providers.remove", container: container, "issuer \(issuer)")
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

extension NimbusService {
    /// Disables or enables an app user's account (`nimbus users disable|enable`); accounts
    /// serve every container, so an administrator of every container only.
    public func setUserDisabled(name: String, _ disabled: Bool, as context: OperatorContext) async throws {
        try context.requireChange()
        try context.requireEveryContainer()
        try await setUserDisabled(name: name, disabled, by: context.account.name)
    }

    /// Deletes an app user's account and their own data everywhere (`nimbus users delete`).
    public func deleteUser(name: String, as context: OperatorContext) async throws -> UserDeletion {
        try context.requireChange()
        try context.requireEveryContainer()
        return try await deleteUser(name: name, by: context.account.name)
    }
}
