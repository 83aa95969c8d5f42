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

/// `GET setup`: whether the first run's setup link is open (no operator exists yet).
public struct SetupState: WireBody, Hashable {
    public var open: Bool

    public init(open: Bool) { self.open = open }
    public init(json: ObjectReader) throws(CloudKitError) { open = try json.bool(ConsoleKey.open) ?? false }
    public var json: JSON { [ConsoleKey.open: .bool(open)] }
}

/// `POST setup`: the setup link's token, and the first operator's name and password.
public struct FirstOperatorSetup: WireBody, Hashable {
    public var token: String
    public var name: String
    public var password: String

    public init(token: String, name: String, password: String) {
        self.token = token
        self.name = name
        self.password = password
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        token = try json.requiredString(ConsoleKey.token)
        name = try json.requiredString(ConsoleKey.name)
        password = try json.requiredString(ConsoleKey.password)
    }

    public var json: JSON { [ConsoleKey.token: .string(token), ConsoleKey.name: .string(name), ConsoleKey.password: .string(password)] }
}

/// `POST session/end`: who was signed out.
public struct OperatorSignedOut: WireBody, Hashable {
    public var signedOut: String

    public init(signedOut: String) { self.signedOut = signedOut }
    public init(json: ObjectReader) throws(CloudKitError) { signedOut = try json.requiredString(ConsoleKey.signedOut) }
    public var json: JSON { [ConsoleKey.signedOut: .string(signedOut)] }
}

/// `POST me/password`: the signed-in operator's password, and the one it becomes.
public struct OperatorPasswordChange: WireBody, Hashable {
    public var currentPassword: String
    public var newPassword: String

    public init(currentPassword: String, newPassword: String) {
        self.currentPassword = currentPassword
        self.newPassword = newPassword
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        currentPassword = try json.requiredString(ConsoleKey.currentPassword)
        newPassword = try json.requiredString(ConsoleKey.newPassword)
    }

    public var json: JSON { [ConsoleKey.currentPassword: .string(currentPassword), ConsoleKey.newPassword: .string(newPassword)] }
}

/// A password change's answer.
public struct OperatorPasswordChanged: WireBody, Hashable {
    public var passwordChanged: Bool

    public init(passwordChanged: Bool = true) { self.passwordChanged = passwordChanged }
    public init(json: ObjectReader) throws(CloudKitError) { passwordChanged = try json.bool(ConsoleKey.passwordChanged) ?? false }
    public var json: JSON { [ConsoleKey.passwordChanged: .bool(passwordChanged)] }
}

/// `POST me/second-factor`'s answer: the new secret, and the `otpauth:` URI an authenticator
/// app scans (confirmed by a code before it counts).
public struct SecondFactorEnrollment: WireBody, Hashable {
    public var secret: String
    public var uri: String

    public init(secret: String, uri: String) {
        self.secret = secret
        self.uri = uri
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        secret = try json.requiredString(ConsoleKey.secret)
        uri = try json.requiredString(ConsoleKey.uri)
    }

    public var json: JSON { [ConsoleKey.secret: .string(secret), ConsoleKey.uri: .string(uri)] }
}

/// `POST me/second-factor/confirm` and `…/remove`: the authenticator's current code.
public struct SecondFactorCode: WireBody, Hashable {
    public var code: String

    public init(code: String) { self.code = code }
    public init(json: ObjectReader) throws(CloudKitError) { code = try json.requiredString(ConsoleKey.code) }
    public var json: JSON { [ConsoleKey.code: .string(code)] }
}

/// Whether the signed-in operator now has a second factor.
public struct SecondFactorState: WireBody, Hashable {
    public var secondFactor: Bool

    public init(secondFactor: Bool) { self.secondFactor = secondFactor }
    public init(json: ObjectReader) throws(CloudKitError) { secondFactor = try json.bool(ConsoleKey.secondFactor) ?? false }
    public var json: JSON { [ConsoleKey.secondFactor: .bool(secondFactor)] }
}

/// `GET operators`.
public struct OperatorList: WireBody, Hashable {
    public var operators: [OperatorAccount]

    public init(operators: [OperatorAccount]) { self.operators = operators }
    public init(json: ObjectReader) throws(CloudKitError) { operators = try json.list(ConsoleKey.operators) }
    public var json: JSON { [ConsoleKey.operators: operators.json] }
}

/// `POST operators`: a new operator's name, role (administrator when absent) and the
/// containers it may see (every container when absent).
public struct OperatorCreation: WireBody, Hashable {
    public var name: String
    public var role: String?
    public var containers: [String]?

    public init(name: String, role: String? = nil, containers: [String]? = nil) {
        self.name = name
        self.role = role
        self.containers = containers
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        name = try json.requiredString(ConsoleKey.name)
        role = try json.string(ConsoleKey.role)
        containers = try json.stringArray(ConsoleKey.containers)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.name: .string(name)]
        if let role { object[ConsoleKey.role] = .string(role) }
        if let containers { object[ConsoleKey.containers] = .strings(containers) }
        return .object(object)
    }
}

/// `POST operators/NAME`: what to change; `everyContainer: true` lifts a container list.
public struct OperatorChange: WireBody, Hashable {
    public var role: String?
    public var containers: [String]?
    public var everyContainer: Bool?
    public var disabled: Bool?

    public init(role: String? = nil, containers: [String]? = nil, everyContainer: Bool? = nil, disabled: Bool? = nil) {
        self.role = role
        self.containers = containers
        self.everyContainer = everyContainer
        self.disabled = disabled
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        role = try json.string(ConsoleKey.role)
        containers = try json.stringArray(ConsoleKey.containers)
        everyContainer = try json.bool(ConsoleKey.everyContainer)
        disabled = try json.bool(ConsoleKey.disabled)
    }

    public var json: JSON {
        var object = JSONObject()
        if let role { object[ConsoleKey.role] = .string(role) }
        if let containers { object[ConsoleKey.containers] = .strings(containers) }
        if let everyContainer { object[ConsoleKey.everyContainer] = .bool(everyContainer) }
        if let disabled { object[ConsoleKey.disabled] = .bool(disabled) }
        return .object(object)
    }

    /// The containers to set: `.some(nil)` for every container, nil for no change.
    public var containersToSet: [String]?? { everyContainer == true ? .some(nil) : containers.map { .some($0) } }
}

/// A password an operator or a user is given (a new operator's or a reset's one-time
/// password): shown once.
public struct IssuedPassword: WireBody, Hashable {
    public var name: String
    public var password: String

    public init(name: String, password: String) {
        self.name = name
        self.password = password
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        name = try json.requiredString(ConsoleKey.name)
        password = try json.requiredString(ConsoleKey.password)
    }

    public var json: JSON { [ConsoleKey.name: .string(name), ConsoleKey.password: .string(password)] }
}

/// `POST operators`' answer: the new operator, and its one-time password beside its keys.
public struct CreatedOperator: WireBody, Hashable {
    public var account: OperatorAccount
    public var password: String

    public init(account: OperatorAccount, password: String) {
        self.account = account
        self.password = password
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        account = try OperatorAccount(json: json)
        password = try json.requiredString(ConsoleKey.password)
    }

    public var json: JSON {
        var object = account.fields
        object[ConsoleKey.password] = .string(password)
        return .object(object)
    }
}

/// What a deletion took away, by name (an operator, a subscription).
public struct Deleted: WireBody, Hashable {
    public var deleted: String

    public init(deleted: String) { self.deleted = deleted }
    public init(json: ObjectReader) throws(CloudKitError) { deleted = try json.requiredString(ConsoleKey.deleted) }
    public var json: JSON { [ConsoleKey.deleted: .string(deleted)] }
}

/// `GET audit?limit=&before=`: what operators did, newest first.
public struct AuditLog: WireBody, Hashable {
    public struct Entry: WireBody, Hashable {
        public var id: Int64
        public var at: Int64
        public var operatorName: String
        /// What was done (`schema.deploy`, `roles.grant`, `data.change`, …).
        public var action: String
        public var detail: String
        /// The container it was done in; nil for the server as a whole.
        public var container: String?

        public init(id: Int64, at: Int64, operatorName: String, action: String, detail: String, container: String?) {
            self.id = id
            self.at = at
            self.operatorName = operatorName
            self.action = action
            self.detail = detail
            self.container = container
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            id = try json.int(ConsoleKey.id) ?? 0
            at = try json.int(ConsoleKey.at) ?? 0
            operatorName = try json.requiredString(ConsoleKey.operatorAccount)
            action = try json.requiredString(ConsoleKey.action)
            detail = try json.string(ConsoleKey.detail) ?? ""
            container = try json.string(ConsoleKey.container)
        }

        public var json: JSON {
            var object: JSONObject = [
                ConsoleKey.id: .int(id), ConsoleKey.at: .int(at), ConsoleKey.operatorAccount: .string(operatorName),
                ConsoleKey.action: .string(action), ConsoleKey.detail: .string(detail),
            ]
            if let container { object[ConsoleKey.container] = .string(container) }
            return .object(object)
        }
    }

    public var entries: [Entry]

    public init(entries: [Entry]) { self.entries = entries }
    public init(json: ObjectReader) throws(CloudKitError) { entries = try json.list(ConsoleKey.entries) }
    public var json: JSON { [ConsoleKey.entries: entries.json] }
}
