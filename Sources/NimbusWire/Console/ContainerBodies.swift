/// The admin API's container bodies (docs/dashboard.md, "Containers"): containers, their API
/// tokens, server-to-server keys and settings (sign-up, user discovery, limits, APNs, sign-in
/// providers). Keys come from `ConsoleKey`; the dashboard's script reads the same names.

/// `GET containers`: the containers the operator may see.
public struct ContainerList: WireBody, Hashable {
    public struct Entry: WireBody, Hashable {
        public var id: String
        public var createdAt: Int64

        public init(id: String, createdAt: Int64) {
            self.id = id
            self.createdAt = createdAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            id = try json.requiredString(ConsoleKey.id)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
        }

        public var json: JSON { [ConsoleKey.id: .string(id), ConsoleKey.createdAt: .int(createdAt)] }
    }

    public var containers: [Entry]

    public init(containers: [Entry]) { self.containers = containers }
    public init(json: ObjectReader) throws(CloudKitError) { containers = try json.list(ConsoleKey.containers) }
    public var json: JSON { [ConsoleKey.containers: containers.json] }
}

/// `POST containers` `{id}`, and its answer: a container's identifier.
public struct ContainerName: WireBody, Hashable {
    public var id: String

    public init(id: String) { self.id = id }
    public init(json: ObjectReader) throws(CloudKitError) { id = try json.requiredString(ConsoleKey.id) }
    public var json: JSON { [ConsoleKey.id: .string(id)] }
}

/// `POST containers/C/tokens`: an API token's environment, the origins a browser may call from,
/// where a web sign-in returns to, and a name for people.
public struct APITokenRequest: WireBody, Hashable {
    public var environment: String
    /// Nil: every origin (`*`).
    public var allowedOrigins: [String]?
    public var signInCallback: String?
    public var name: String?

    public init(environment: String, allowedOrigins: [String]? = nil, signInCallback: String? = nil, name: String? = nil) {
        self.environment = environment
        self.allowedOrigins = allowedOrigins
        self.signInCallback = signInCallback
        self.name = name
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        environment = try json.requiredString(ConsoleKey.environment)
        allowedOrigins = try json.stringArray(ConsoleKey.allowedOrigins)
        signInCallback = try json.string(ConsoleKey.signInCallback)
        name = try json.string(ConsoleKey.name)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.environment: .string(environment)]
        if let allowedOrigins { object[ConsoleKey.allowedOrigins] = .strings(allowedOrigins) }
        if let signInCallback { object[ConsoleKey.signInCallback] = .string(signInCallback) }
        if let name { object[ConsoleKey.name] = .string(name) }
        return .object(object)
    }
}

/// A new API token: shown once, then only its identifier.
public struct APITokenCreated: WireBody, Hashable {
    public var apiToken: String

    public init(apiToken: String) { self.apiToken = apiToken }
    public init(json: ObjectReader) throws(CloudKitError) { apiToken = try json.requiredString(ConsoleKey.apiToken) }
    public var json: JSON { [ConsoleKey.apiToken: .string(apiToken)] }
}

/// `GET containers/C/tokens`: every API token, the secret never.
public struct APITokenList: WireBody, Hashable {
    public struct Entry: WireBody, Hashable {
        public var id: String
        public var environment: String
        public var createdAt: Int64
        public var revoked: Bool
        public var allowedOrigins: [String]
        public var name: String?
        public var lastUsedAt: Int64?
        public var signInCallback: String?

        public init(
            id: String, environment: String, createdAt: Int64, revoked: Bool, allowedOrigins: [String], name: String?, lastUsedAt: Int64?,
            signInCallback: String?
        ) {
            self.id = id
            self.environment = environment
            self.createdAt = createdAt
            self.revoked = revoked
            self.allowedOrigins = allowedOrigins
            self.name = name
            self.lastUsedAt = lastUsedAt
            self.signInCallback = signInCallback
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            id = try json.requiredString(ConsoleKey.id)
            environment = try json.requiredString(ConsoleKey.environment)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
            revoked = try json.bool(ConsoleKey.revoked) ?? false
            allowedOrigins = try json.stringArray(ConsoleKey.allowedOrigins) ?? []
            name = try json.string(ConsoleKey.name)
            lastUsedAt = try json.int(ConsoleKey.lastUsedAt)
            signInCallback = try json.string(ConsoleKey.signInCallback)
        }

        public var json: JSON {
            var object: JSONObject = [
                ConsoleKey.id: .string(id), ConsoleKey.environment: .string(environment), ConsoleKey.createdAt: .int(createdAt),
                ConsoleKey.revoked: .bool(revoked), ConsoleKey.allowedOrigins: .strings(allowedOrigins),
            ]
            if let name { object[ConsoleKey.name] = .string(name) }
            if let lastUsedAt { object[ConsoleKey.lastUsedAt] = .int(lastUsedAt) }
            if let signInCallback { object[ConsoleKey.signInCallback] = .string(signInCallback) }
            return .object(object)
        }
    }

    public var tokens: [Entry]

    public init(tokens: [Entry]) { self.tokens = tokens }
    public init(json: ObjectReader) throws(CloudKitError) { tokens = try json.list(ConsoleKey.tokens) }
    public var json: JSON { [ConsoleKey.tokens: tokens.json] }
}

/// `POST containers/C/tokens/revoke`: every token of the environment (of both without one).
public struct APITokenRevocation: WireBody, Hashable {
    public var environment: String?

    public init(environment: String?) { self.environment = environment }
    public init(json: ObjectReader) throws(CloudKitError) { environment = try json.string(ConsoleKey.environment) }

    public var json: JSON {
        var object = JSONObject()
        if let environment { object[ConsoleKey.environment] = .string(environment) }
        return .object(object)
    }
}

/// What a revocation took back: one token or key by its identifier, how many tokens, or (a
/// user's session) that it is done.
public struct Revoked: WireBody, Hashable {
    public enum What: Hashable, Sendable {
        case one(String)
        case count(Int64)
        case done
    }

    public var what: What

    public init(_ what: What) { self.what = what }

    public init(json: ObjectReader) throws(CloudKitError) {
        switch json.value(ConsoleKey.revoked) {
        case .bool(true)?: what = .done
        case .int(let count)?: what = .count(count)
        default: what = .one(try json.requiredString(ConsoleKey.revoked))
        }
    }

    public var json: JSON {
        switch what {
        case .one(let id): [ConsoleKey.revoked: .string(id)]
        case .count(let count): [ConsoleKey.revoked: .int(count)]
        case .done: [ConsoleKey.revoked: .bool(true)]
        }
    }
}

/// `GET containers/C/keys`: the server-to-server keys, by the key's identifier.
public struct ServerKeyList: WireBody, Hashable {
    public struct Entry: WireBody, Hashable {
        public var keyID: String
        public var environment: String
        public var createdAt: Int64
        public var revoked: Bool

        public init(keyID: String, environment: String, createdAt: Int64, revoked: Bool) {
            self.keyID = keyID
            self.environment = environment
            self.createdAt = createdAt
            self.revoked = revoked
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            keyID = try json.requiredString(ConsoleKey.keyID)
            environment = try json.requiredString(ConsoleKey.environment)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
            revoked = try json.bool(ConsoleKey.revoked) ?? false
        }

        public var json: JSON {
            [
                ConsoleKey.keyID: .string(keyID), ConsoleKey.environment: .string(environment), ConsoleKey.createdAt: .int(createdAt),
                ConsoleKey.revoked: .bool(revoked),
            ]
        }
    }

    public var keys: [Entry]

    public init(keys: [Entry]) { self.keys = keys }
    public init(json: ObjectReader) throws(CloudKitError) { keys = try json.list(ConsoleKey.keys) }
    public var json: JSON { [ConsoleKey.keys: keys.json] }
}

/// `POST containers/C/keys`: a public key (PEM) for an environment; the answer is its `keyID`.
public struct ServerKeyAddition: WireBody, Hashable {
    public var environment: String
    public var publicKeyPEM: String

    public init(environment: String, publicKeyPEM: String) {
        self.environment = environment
        self.publicKeyPEM = publicKeyPEM
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        environment = try json.requiredString(ConsoleKey.environment)
        publicKeyPEM = try json.requiredString(ConsoleKey.publicKeyPEM)
    }

    public var json: JSON { [ConsoleKey.environment: .string(environment), ConsoleKey.publicKeyPEM: .string(publicKeyPEM)] }
}

public struct ServerKeyAdded: WireBody, Hashable {
    public var keyID: String

    public init(keyID: String) { self.keyID = keyID }
    public init(json: ObjectReader) throws(CloudKitError) { keyID = try json.requiredString(ConsoleKey.keyID) }
    public var json: JSON { [ConsoleKey.keyID: .string(keyID)] }
}

/// `GET containers/C/settings`, and every settings change's answer.
public struct ContainerSettingsView: WireBody, Hashable {
    /// One of the container's limits: its value, whether it is a quota, whether the container
    /// sets it (else the server's default), and the least it may be set to.
    public struct LimitSetting: WireBody, Hashable {
        public var name: String
        public var value: Int64
        public var quota: Bool
        public var set: Bool
        public var minimum: Int64

        public init(name: String, value: Int64, quota: Bool, set: Bool, minimum: Int64) {
            self.name = name
            self.value = value
            self.quota = quota
            self.set = set
            self.minimum = minimum
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            value = try json.int(ConsoleKey.value) ?? 0
            quota = try json.bool(ConsoleKey.quota) ?? false
            set = try json.bool(ConsoleKey.set) ?? false
            minimum = try json.int(ConsoleKey.minimum) ?? 0
        }

        public var json: JSON {
            [
                ConsoleKey.name: .string(name), ConsoleKey.value: .int(value), ConsoleKey.quota: .bool(quota), ConsoleKey.set: .bool(set),
                ConsoleKey.minimum: .int(minimum),
            ]
        }
    }

    /// An OpenID issuer whose tokens sign users in.
    public struct IdentityProvider: WireBody, Hashable {
        public var issuer: String
        public var audience: String
        /// Where its keys come from (a URL, or the key set itself).
        public var jwks: String
        public var createdAt: Int64

        public init(issuer: String, audience: String, jwks: String, createdAt: Int64) {
            self.issuer = issuer
            self.audience = audience
            self.jwks = jwks
            self.createdAt = createdAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            issuer = try json.requiredString(ConsoleKey.issuer)
            audience = try json.requiredString(ConsoleKey.audience)
            jwks = try json.requiredString(ConsoleKey.jwks)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
        }

        public var json: JSON {
            [
                ConsoleKey.issuer: .string(issuer), ConsoleKey.audience: .string(audience), ConsoleKey.jwks: .string(jwks),
                ConsoleKey.createdAt: .int(createdAt),
            ]
        }
    }

    /// The APNs key as far as it identifies itself: the key never leaves the server.
    public struct APNsIdentity: WireBody, Hashable {
        public var teamID: String
        public var keyID: String
        public var topic: String
        public var updatedAt: Int64

        public init(teamID: String, keyID: String, topic: String, updatedAt: Int64) {
            self.teamID = teamID
            self.keyID = keyID
            self.topic = topic
            self.updatedAt = updatedAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            teamID = try json.requiredString(ConsoleKey.teamID)
            keyID = try json.requiredString(ConsoleKey.keyID)
            topic = try json.requiredString(ConsoleKey.topic)
            updatedAt = try json.int(ConsoleKey.updatedAt) ?? 0
        }

        public var json: JSON {
            [
                ConsoleKey.teamID: .string(teamID), ConsoleKey.keyID: .string(keyID), ConsoleKey.topic: .string(topic),
                ConsoleKey.updatedAt: .int(updatedAt),
            ]
        }
    }

    public var signUp: Bool
    public var userDiscovery: Bool
    public var limits: [LimitSetting]
    public var identityProviders: [IdentityProvider]
    public var apns: APNsIdentity?

    public init(signUp: Bool, userDiscovery: Bool, limits: [LimitSetting], identityProviders: [IdentityProvider], apns: APNsIdentity?) {
        self.signUp = signUp
        self.userDiscovery = userDiscovery
        self.limits = limits
        self.identityProviders = identityProviders
        self.apns = apns
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        signUp = try json.bool(ConsoleKey.signUp) ?? false
        userDiscovery = try json.bool(ConsoleKey.userDiscovery) ?? false
        limits = try json.list(ConsoleKey.limits)
        identityProviders = try json.list(ConsoleKey.identityProviders)
        apns = try json.object(ConsoleKey.apns).map { reader throws(CloudKitError) in try APNsIdentity(json: reader) }
    }

    public var json: JSON {
        var object: JSONObject = [
            ConsoleKey.signUp: .bool(signUp), ConsoleKey.userDiscovery: .bool(userDiscovery), ConsoleKey.limits: limits.json,
            ConsoleKey.identityProviders: identityProviders.json,
        ]
        if let apns { object[ConsoleKey.apns] = apns.json }
        return .object(object)
    }
}

/// `POST containers/C/settings`: what to change. A limit given as null goes back to the
/// server's default.
public struct ContainerSettingsChange: WireBody, Hashable {
    public var signUp: Bool?
    public var userDiscovery: Bool?
    /// By limit name: a value, or nil for the server's default.
    public var limits: [String: Int64?]

    public init(signUp: Bool? = nil, userDiscovery: Bool? = nil, limits: [String: Int64?] = [:]) {
        self.signUp = signUp
        self.userDiscovery = userDiscovery
        self.limits = limits
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        signUp = try json.bool(ConsoleKey.signUp)
        userDiscovery = try json.bool(ConsoleKey.userDiscovery)
        limits = [:]
        if let given = try json.object(ConsoleKey.limits) {
            for (name, value) in given.object.pairs {
                switch value {
                case .null: limits[name] = .some(nil)
                case .int(let number): limits[name] = number
                default: throw .badRequest("\(given.childPath(Names.escaped(name))): a whole number, or null for the server's default")
                }
            }
        }
    }

    public var json: JSON {
        var object = JSONObject()
        if let signUp { object[ConsoleKey.signUp] = .bool(signUp) }
        if let userDiscovery { object[ConsoleKey.userDiscovery] = .bool(userDiscovery) }
        if !limits.isEmpty {
            var given = JSONObject()
            for (name, value) in limits.sorted(by: { $0.key < $1.key }) { given[name] = value.map(JSON.int) ?? .null }
            object[ConsoleKey.limits] = .object(given)
        }
        return .object(object)
    }
}

/// `POST containers/C/apns`: the APNs key a container's pushes are signed with.
public struct APNsCredentials: WireBody, Hashable {
    public var teamID: String
    public var keyID: String
    public var topic: String
    public var privateKeyPEM: String

    public init(teamID: String, keyID: String, topic: String, privateKeyPEM: String) {
        self.teamID = teamID
        self.keyID = keyID
        self.topic = topic
        self.privateKeyPEM = privateKeyPEM
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        teamID = try json.requiredString(ConsoleKey.teamID)
        keyID = try json.requiredString(ConsoleKey.keyID)
        topic = try json.requiredString(ConsoleKey.topic)
        privateKeyPEM = try json.requiredString(ConsoleKey.privateKeyPEM)
    }

    public var json: JSON {
        [
            ConsoleKey.teamID: .string(teamID), ConsoleKey.keyID: .string(keyID), ConsoleKey.topic: .string(topic),
            ConsoleKey.privateKeyPEM: .string(privateKeyPEM),
        ]
    }
}

/// `POST containers/C/providers`: an OpenID issuer to trust, the audience its tokens name, and
/// its key set (a URL, or the JSON itself).
public struct IdentityProviderAddition: WireBody, Hashable {
    public var issuer: String
    public var audience: String
    public var jwks: String

    public init(issuer: String, audience: String, jwks: String) {
        self.issuer = issuer
        self.audience = audience
        self.jwks = jwks
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        issuer = try json.requiredString(ConsoleKey.issuer)
        audience = try json.requiredString(ConsoleKey.audience)
        jwks = try json.requiredString(ConsoleKey.jwks)
    }

    public var json: JSON { [ConsoleKey.issuer: .string(issuer), ConsoleKey.audience: .string(audience), ConsoleKey.jwks: .string(jwks)] }
}

/// `POST containers/C/providers/remove`: the issuer to stop trusting.
public struct IdentityProviderRemoval: WireBody, Hashable {
    public var issuer: String

    public init(issuer: String) { self.issuer = issuer }
    public init(json: ObjectReader) throws(CloudKitError) { issuer = try json.requiredString(ConsoleKey.issuer) }
    public var json: JSON { [ConsoleKey.issuer: .string(issuer)] }
}
