import HTTPTypes
import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// The admin API behind the dashboard (docs/dashboard.md), under `/admin/1/`: operator sign-in
/// to a session cookie (HttpOnly, SameSite=Strict), who is signed in, operators, the audit log.
/// Reads are GETs; every change is a POST that must echo the session's CSRF token; the route
/// table (`OperatorRoutes`) authenticates each before its handler runs.
enum AdminRoutes {
    static let cookieName = "nimbus_operator"

    static func add(to router: MethodRecordingRouter, parts: ServerParts) {
        let service = parts.service
        let admin = router.group("admin/1")
        let routes = OperatorRoutes(unauthenticated: admin, service: service)

        admin.post("session") { request, context in
            let signIn = try OperatorSignIn(json: try await RouteInput(request: request, context: context, parts: parts).body())
            let (token, signedIn) = try await service.signInOperator(
                name: signIn.name, password: signIn.password, code: signIn.code, clientAddress: context.clientAddress)
            return session(token, signedIn, request, context)
        }
        // The first run (docs/dashboard.md): whether a setup link is open, and the link's form,
        // which makes the first operator and signs them in. From this machine only unless the
        // server was started with --setup-from-anywhere.
        admin.get("setup") { request, context in
            Reply.json(SetupState(open: try await service.firstRunSetupIsOpen()).json, context: context)
        }
        admin.post("setup") { request, context in
            guard parts.setupFromAnywhere || isLoopback(context.clientAddress) else {
                throw CloudKitError(
                    .accessDenied,
                    "the setup link works only from the server's own machine; open it there, start nimbus serve with --setup-from-anywhere, or run nimbus operators create NAME")
            }
            let setup = try FirstOperatorSetup(json: try await RouteInput(request: request, context: context, parts: parts).body())
            let (token, signedIn) = try await service.setUpFirstOperator(
                token: setup.token, name: setup.name, password: setup.password, clientAddress: context.clientAddress)
            return session(token, signedIn, request, context)
        }
        routes.get("session") { request, context, operatorContext in
            Reply.json(describe(operatorContext), context: context)
        }
        routes.post("session/end") { request, context, operatorContext in
            try await service.signOutOperator(token: cookie(request) ?? "")
            var response = Reply.json(OperatorSignedOut(signedOut: operatorContext.account.name).json, context: context)
            response.headers[.setCookie] = "\(cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
            return response
        }

        // The signed-in operator's own credentials: its password and its optional second factor.
        routes.post("me/password") { request, context, operatorContext in
            let change = try OperatorPasswordChange(json: try await RouteInput(request: request, context: context, parts: parts).body())
            try await service.changeOperatorPassword(current: change.currentPassword, new: change.newPassword, as: operatorContext)
            return Reply.json(OperatorPasswordChanged().json, context: context)
        }
        routes.post("me/second-factor") { request, context, operatorContext in
            let (secret, uri) = try await service.beginSecondFactor(as: operatorContext)
            return Reply.json(SecondFactorEnrollment(secret: secret, uri: uri).json, context: context)
        }
        routes.post("me/second-factor/confirm") { request, context, operatorContext in
            let given = try SecondFactorCode(json: try await RouteInput(request: request, context: context, parts: parts).body())
            try await service.confirmSecondFactor(code: given.code, as: operatorContext)
            return Reply.json(SecondFactorState(secondFactor: true).json, context: context)
        }
        routes.post("me/second-factor/remove") { request, context, operatorContext in
            let given = try SecondFactorCode(json: try await RouteInput(request: request, context: context, parts: parts).body())
            try await service.removeSecondFactor(code: given.code, as: operatorContext)
            return Reply.json(SecondFactorState(secondFactor: false).json, context: context)
        }

        routes.get("operators") { request, context, operatorContext in
            Reply.json(OperatorList(operators: try await service.operators().map(account)).json, context: context)
        }
        // Operators are made, changed and removed by an administrator of every container only.
        routes.post("operators", needs: .everyContainer) { request, context, operatorContext in
            let creation = try OperatorCreation(json: try await RouteInput(request: request, context: context, parts: parts).body())
            let (row, password) = try await service.createOperator(
                name: creation.name, role: try operatorRole(creation.role ?? OperatorRole.administrator.rawValue), containers: creation.containers,
                by: operatorContext.account.name)
            return Reply.json(CreatedOperator(account: account(row), password: password).json, context: context)
        }
        routes.post("operators/:name", needs: .everyContainer) { request, context, actor in
            let change = try OperatorChange(json: try await RouteInput(request: request, context: context, parts: parts).body())
            let row = try await service.updateOperator(
                name: context.parameter("name") ?? "", role: try change.role.map(operatorRole), containers: change.containersToSet,
                disabled: change.disabled, by: actor.account.name)
            return Reply.json(account(row).json, context: context)
        }
        routes.post("operators/:name/password", needs: .everyContainer) { request, context, actor in
            let name = context.parameter("name") ?? ""
            let password = try await service.resetOperatorPassword(name: name, by: actor.account.name)
            return Reply.json(IssuedPassword(name: name, password: password).json, context: context)
        }
        routes.post("operators/:name/delete", needs: .everyContainer) { request, context, actor in
            let name = context.parameter("name") ?? ""
            try await service.deleteOperator(name: name, by: actor.account.name)
            return Reply.json(Deleted(deleted: name).json, context: context)
        }

        addContainerRoutes(to: routes, parts: parts)
        ConsoleRoutes.add(to: routes, parts: parts)  // schema, data, people, the request log
        BackupRoutes.add(to: routes, parts: parts)
        TimeTravelRoutes.add(to: routes, parts: parts)

        routes.get("audit") { request, context, operatorContext in
            let limit = request.query("limit").flatMap(Int.init) ?? 50
            let before = request.query("before").flatMap(Int64.init)
            let entries = try await service.auditLog(for: operatorContext, limit: limit, beforeID: before).map {
                AuditLog.Entry(id: $0.id, at: $0.at, operatorName: $0.operatorName, action: $0.action, detail: $0.detail, container: $0.container)
            }
            return Reply.json(AuditLog(entries: entries).json, context: context)
        }
    }

    /// Containers, their API tokens and server-to-server keys.
    static func addContainerRoutes(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        @Sendable func body(_ request: Request, _ context: NimbusRequestContext) async throws -> ObjectReader {
            try await RouteInput(request: request, context: context, parts: parts).body()
        }
        @Sendable func container(_ context: NimbusRequestContext) -> String { ConsoleRoutes.container(context) }
        @Sendable func environment(_ name: String?) throws -> NimbusStorage.Environment? {
            try name.map(ConsoleRoutes.environment(named:))
        }

        routes.get("containers") { request, context, operatorContext in
            let list = try await service.containers(visibleTo: operatorContext)
            return Reply.json(ContainerList(containers: list.map { .init(id: $0.id, createdAt: $0.createdAt) }).json, context: context)
        }
        routes.post("containers") { request, context, operatorContext in
            let named = try ContainerName(json: try await body(request, context))
            try await service.createContainer(named.id, as: operatorContext)
            return Reply.json(named.json, context: context)
        }
        routes.post("containers/:container/tokens") { request, context, operatorContext in
            let wanted = try APITokenRequest(json: try await body(request, context))
            let token = try await service.createAPIToken(
                container: container(context), environment: try environment(wanted.environment) ?? .development,
                allowedOrigins: wanted.allowedOrigins ?? ["*"], signInCallback: wanted.signInCallback, name: wanted.name, as: operatorContext)
            return Reply.json(APITokenCreated(apiToken: token).json, context: context)
        }
        routes.get("containers/:container/tokens") { request, context, operatorContext in
            let tokens = try await service.apiTokens(container: container(context), as: operatorContext)
            let entries = tokens.map {
                APITokenList.Entry(
                    id: $0.id, environment: $0.environment.rawValue, createdAt: $0.createdAt, revoked: $0.isRevoked,
                    allowedOrigins: $0.allowedOrigins, name: $0.name, lastUsedAt: $0.lastUsedAt, signInCallback: $0.signInCallback)
            }
            return Reply.json(APITokenList(tokens: entries).json, context: context)
        }
        routes.post("containers/:container/tokens/:token/revoke") { request, context, operatorContext in
            let token = try await service.revokeAPIToken(
                container: container(context), id: context.parameter("token") ?? "", as: operatorContext)
            return Reply.json(Revoked(.one(token.id)).json, context: context)
        }
        routes.post("containers/:container/tokens/revoke") { request, context, operatorContext in
            let revocation = try APITokenRevocation(json: try await body(request, context))
            let count = try await service.revokeAPITokens(
                container: container(context), environment: try environment(revocation.environment), as: operatorContext)
            return Reply.json(Revoked(.count(Int64(count))).json, context: context)
        }
        /// A container's settings as the page reads them (and a change answers them).
        @Sendable func settings(_ container: String, as operatorContext: NimbusService.OperatorContext) async throws -> JSON {
            let (settings, limits) = try await service.containerSettings(container: container, as: operatorContext)
            let (apns, providers) = try await service.pushAndSignIn(container: container, as: operatorContext)
            return ContainerSettingsView(
                signUp: settings.signUp, userDiscovery: settings.userDiscovery,
                limits: ContainerLimit.allCases.map {
                    .init(
                        name: $0.rawValue, value: limits[$0], quota: $0.isQuota, set: limits.overrides[$0.rawValue] != nil, minimum: $0.minimum)
                },
                identityProviders: providers.map { .init(issuer: $0.issuer, audience: $0.audience, jwks: $0.jwksSource, createdAt: $0.createdAt) },
                // The key itself never leaves the server: what identifies it is enough to check it.
                apns: apns.map { .init(teamID: $0.teamID, keyID: $0.keyID, topic: $0.topic, updatedAt: $0.updatedAt) }
            ).json
        }
        routes.get("containers/:container/settings") { request, context, operatorContext in
            Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/settings") { request, context, operatorContext in
            let change = try ContainerSettingsChange(json: try await body(request, context))
            try await service.changeContainerSettings(
                container: container(context), signUp: change.signUp, userDiscovery: change.userDiscovery, limits: change.limits,
                as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/apns") { request, context, operatorContext in
            let key = try APNsCredentials(json: try await body(request, context))
            try await service.setAPNsCredentials(
                container: container(context), teamID: key.teamID, keyID: key.keyID, topic: key.topic, privateKeyPEM: key.privateKeyPEM,
                as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/apns/remove") { request, context, operatorContext in
            try await service.removeAPNsCredentials(container: container(context), as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/providers") { request, context, operatorContext in
            let provider = try IdentityProviderAddition(json: try await body(request, context))
            try await service.addIdentityProvider(
                container: container(context), issuer: provider.issuer, audience: provider.audience, jwks: provider.jwks, as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/providers/remove") { request, context, operatorContext in
            let removal = try IdentityProviderRemoval(json: try await body(request, context))
            try await service.removeIdentityProvider(container: container(context), issuer: removal.issuer, as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.get("containers/:container/keys") { request, context, operatorContext in
            let keys = try await service.serverKeys(container: container(context), as: operatorContext)
            let entries = keys.map {
                ServerKeyList.Entry(keyID: $0.keyID, environment: $0.environment.rawValue, createdAt: $0.createdAt, revoked: $0.isRevoked)
            }
            return Reply.json(ServerKeyList(keys: entries).json, context: context)
        }
        routes.post("containers/:container/keys") { request, context, operatorContext in
            let addition = try ServerKeyAddition(json: try await body(request, context))
            let row = try await service.addServerKey(
                container: container(context), environment: try environment(addition.environment) ?? .development,
                publicKeyPEM: addition.publicKeyPEM, as: operatorContext)
            return Reply.json(ServerKeyAdded(keyID: row.keyID).json, context: context)
        }
        routes.post("containers/:container/keys/:key/revoke") { request, context, operatorContext in
            let key = context.parameter("key") ?? ""
            try await service.revokeServerKey(id: key, container: container(context), as: operatorContext)
            return Reply.json(Revoked(.one(key)).json, context: context)
        }
    }

    /// A role named in a request body, or BAD_REQUEST naming the roles there are.
    static func operatorRole(_ name: String) throws(CloudKitError) -> OperatorRole {
        guard let role = OperatorRole(rawValue: name) else {
            throw .badRequest("role: '\(Names.escaped(name))' is not a role; use \(OperatorRole.allCases.map(\.rawValue).joined(separator: " or "))")
        }
        return role
    }

    static func cookie(_ request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == cookieName {
                    return String(parts[1]).trimmingCharacters(in: .whitespaces)
                }
            }
        }
        return nil
    }

    /// A signed-in answer: who, the CSRF token, and the session cookie.
    static func session(_ token: String, _ signedIn: NimbusService.OperatorContext, _ request: Request, _ context: NimbusRequestContext)
        -> Response
    {
        var response = Reply.json(describe(signedIn), context: context)
        response.headers[.setCookie] =
            "\(cookieName)=\(token); Path=/; HttpOnly; SameSite=Strict; Max-Age=\(NimbusService.operatorSessionLifetimeMilliseconds / 1000)"
            + (isHTTPS(request, context) ? "; Secure" : "")
        return response
    }

    /// Whether a client address is this machine's own (127.0.0.0/8, ::1, an IPv4-mapped one).
    static func isLoopback(_ address: String?) -> Bool {
        guard var address else { return false }
        if address.hasPrefix("::ffff:") { address.removeFirst("::ffff:".count) }
        return address == "::1" || address.hasPrefix("127.")
    }

    static func isHTTPS(_ request: Request, _ context: NimbusRequestContext) -> Bool {
        context.exchange.baseURL(for: request).hasPrefix("https:")
    }

    static func describe(_ signedIn: NimbusService.OperatorContext) -> JSON {
        OperatorSession(account: account(signedIn.account), csrfToken: signedIn.session.csrfToken).json
    }

    static func account(_ row: OperatorRow) -> OperatorAccount {
        OperatorAccount(
            name: row.name, role: row.role.rawValue, createdAt: row.createdAt, secondFactor: row.secondFactor != nil,
            disabled: row.disabled, containers: row.containers, oneTimePasswordExpiresAt: row.passwordExpiresAt)
    }
}
