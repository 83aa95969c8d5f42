/// The admin API's operator bodies (docs/dashboard.md): signing in, and the operator
/// dictionary that a session's answer and the operators list carry.

/// `POST /admin/1/session`: an operator's name and password, and the authenticator's code when
/// the operator has a second factor.
public struct OperatorSignIn: WireBody, Hashable {
    public var name: String
    public var password: String
    public var code: String?

    public init(name: String, password: String, code: String? = nil) {
        self.name = name
        self.password = password
        self.code = code
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        name = try json.requiredString(ConsoleKey.name)
        password = try json.requiredString(ConsoleKey.password)
        code = try json.string(ConsoleKey.code)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.name: .string(name), ConsoleKey.password: .string(password)]
        if let code { object[ConsoleKey.code] = .string(code) }
        return .object(object)
    }
}

/// An operator as the admin API shows one: never its password or second factor's secret.
public struct OperatorAccount: WireBody, Hashable {
    public var name: String
    /// `OperatorRole`'s raw value (administrator, developer, viewer).
    public var role: String
    public var createdAt: Int64
    public var secondFactor: Bool
    public var disabled: Bool
    /// The containers the operator may see; nil for every container.
    public var containers: [String]?
    /// A one-time password in use: it must be changed, and stops working at this moment.
    public var oneTimePasswordExpiresAt: Int64?

    public init(
        name: String, role: String, createdAt: Int64, secondFactor: Bool, disabled: Bool, containers: [String]?,
        oneTimePasswordExpiresAt: Int64?
    ) {
        self.name = name
        self.role = role
        self.createdAt = createdAt
        self.secondFactor = secondFactor
        self.disabled = disabled
        self.containers = containers
        self.oneTimePasswordExpiresAt = oneTimePasswordExpiresAt
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        name = try json.requiredString(ConsoleKey.name)
        role = try json.requiredString(ConsoleKey.role)
        createdAt = try json.int(ConsoleKey.createdAt) ?? 0
        secondFactor = try json.bool(ConsoleKey.secondFactor) ?? false
        disabled = try json.bool(ConsoleKey.disabled) ?? false
        containers = try json.stringArray(ConsoleKey.containers)
        oneTimePasswordExpiresAt = try json.int(ConsoleKey.oneTimePasswordExpiresAt)
    }

    public var json: JSON { .object(fields) }

    /// The dictionary, for an answer that adds keys of its own (a new operator's password).
    public var fields: JSONObject {
        var object: JSONObject = [
            ConsoleKey.name: .string(name), ConsoleKey.role: .string(role), ConsoleKey.createdAt: .int(createdAt),
            ConsoleKey.secondFactor: .bool(secondFactor), ConsoleKey.disabled: .bool(disabled),
        ]
        if let containers { object[ConsoleKey.containers] = .strings(containers) }
        if let oneTimePasswordExpiresAt { object[ConsoleKey.oneTimePasswordExpiresAt] = .int(oneTimePasswordExpiresAt) }
        return object
    }
}

/// `GET /admin/1/session` and a sign-in's answer: who is signed in, and the token every change
/// must echo in `ConsoleHeader.csrf`.
public struct OperatorSession: WireBody, Hashable {
    public var account: OperatorAccount
    public var csrfToken: String

    public init(account: OperatorAccount, csrfToken: String) {
        self.account = account
        self.csrfToken = csrfToken
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        account = try OperatorAccount(json: json.requiredObject(ConsoleKey.operatorAccount))
        csrfToken = try json.requiredString(ConsoleKey.csrfToken)
    }

    public var json: JSON { [ConsoleKey.operatorAccount: account.json, ConsoleKey.csrfToken: .string(csrfToken)] }
}
