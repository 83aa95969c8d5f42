/// The admin API's people bodies (docs/dashboard.md, "People"): a container's members, an app
/// user's account and detail (sessions, push tokens, roles, subscriptions), every user's
/// subscriptions, and storage by database.

/// `GET containers/C/users?after=&limit=`: the container's members, in joining order.
public struct MemberList: WireBody, Hashable {
    public struct Member: WireBody, Hashable {
        public var name: String
        public var userID: Int64
        public var userRecordName: String
        public var joinedAt: Int64
        public var discoverable: Bool
        public var email: String?
        public var phone: String?
        public var fullName: String?

        public init(
            name: String, userID: Int64, userRecordName: String, joinedAt: Int64, discoverable: Bool, email: String?, phone: String?,
            fullName: String?
        ) {
            self.name = name
            self.userID = userID
            self.userRecordName = userRecordName
            self.joinedAt = joinedAt
            self.discoverable = discoverable
            self.email = email
            self.phone = phone
            self.fullName = fullName
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            userID = try json.int(ConsoleKey.userID) ?? 0
            userRecordName = try json.requiredString(ConsoleKey.userRecordName)
            joinedAt = try json.int(ConsoleKey.joinedAt) ?? 0
            discoverable = try json.bool(ConsoleKey.discoverable) ?? false
            email = try json.string(ConsoleKey.email)
            phone = try json.string(ConsoleKey.phone)
            fullName = try json.string(ConsoleKey.fullName)
        }

        public var json: JSON {
            var object: JSONObject = [
                ConsoleKey.name: .string(name), ConsoleKey.userID: .int(userID), ConsoleKey.userRecordName: .string(userRecordName),
                ConsoleKey.joinedAt: .int(joinedAt), ConsoleKey.discoverable: .bool(discoverable),
            ]
            if let email { object[ConsoleKey.email] = .string(email) }
            if let phone { object[ConsoleKey.phone] = .string(phone) }
            if let fullName { object[ConsoleKey.fullName] = .string(fullName) }
            return .object(object)
        }
    }

    public var users: [Member]

    public init(users: [Member]) { self.users = users }
    public init(json: ObjectReader) throws(CloudKitError) { users = try json.list(ConsoleKey.users) }
    public var json: JSON { [ConsoleKey.users: users.json] }
}

/// `POST containers/C/users`: an app user's account.
public struct UserCreation: WireBody, Hashable {
    public var name: String
    public var password: String
    public var email: String?

    public init(name: String, password: String, email: String? = nil) {
        self.name = name
        self.password = password
        self.email = email
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        name = try json.requiredString(ConsoleKey.name)
        password = try json.requiredString(ConsoleKey.password)
        email = try json.string(ConsoleKey.email)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.name: .string(name), ConsoleKey.password: .string(password)]
        if let email { object[ConsoleKey.email] = .string(email) }
        return .object(object)
    }
}

/// `POST containers/C/users/U/password` `{password}`: a user's password, set by an operator.
public struct UserPassword: WireBody, Hashable {
    public var password: String

    public init(password: String) { self.password = password }
    public init(json: ObjectReader) throws(CloudKitError) { password = try json.requiredString(ConsoleKey.password) }
    public var json: JSON { [ConsoleKey.password: .string(password)] }
}

/// A change to a user's account, answered: the user, and what is now true of it (signed out
/// everywhere after a password is set; disabled or not).
public struct UserAccountChanged: WireBody, Hashable {
    public var name: String
    public var signedOut: Bool?
    public var disabled: Bool?

    public init(name: String, signedOut: Bool? = nil, disabled: Bool? = nil) {
        self.name = name
        self.signedOut = signedOut
        self.disabled = disabled
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        name = try json.requiredString(ConsoleKey.name)
        signedOut = try json.bool(ConsoleKey.signedOut)
        disabled = try json.bool(ConsoleKey.disabled)
    }

    public var json: JSON {
        var object: JSONObject = [ConsoleKey.name: .string(name)]
        if let signedOut { object[ConsoleKey.signedOut] = .bool(signedOut) }
        if let disabled { object[ConsoleKey.disabled] = .bool(disabled) }
        return .object(object)
    }
}

/// `POST containers/C/users/U` `{disabled}`, as `POST operators/NAME` changes an operator.
public struct UserDisabling: WireBody, Hashable {
    public var disabled: Bool

    public init(disabled: Bool) { self.disabled = disabled }

    public init(json: ObjectReader) throws(CloudKitError) {
        guard let disabled = try json.bool(ConsoleKey.disabled) else {
            throw .badRequest("\(json.childPath(ConsoleKey.disabled)): true to disable the account, false to enable it")
        }
        self.disabled = disabled
    }

    public var json: JSON { [ConsoleKey.disabled: .bool(disabled)] }
}

/// What deleting a user took away: memberships, zones, subscriptions, and the shares of others
/// the user left.
public struct UserDeletionOutcome: WireBody, Hashable {
    public var containers: Int64
    public var zones: Int64
    public var subscriptions: Int64
    public var sharesLeft: Int64

    public init(containers: Int, zones: Int, subscriptions: Int, sharesLeft: Int) {
        self.containers = Int64(containers)
        self.zones = Int64(zones)
        self.subscriptions = Int64(subscriptions)
        self.sharesLeft = Int64(sharesLeft)
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        containers = try json.int(ConsoleKey.containers) ?? 0
        zones = try json.int(ConsoleKey.zones) ?? 0
        subscriptions = try json.int(ConsoleKey.subscriptions) ?? 0
        sharesLeft = try json.int(ConsoleKey.sharesLeft) ?? 0
    }

    public var json: JSON {
        [
            ConsoleKey.containers: .int(containers), ConsoleKey.zones: .int(zones), ConsoleKey.subscriptions: .int(subscriptions),
            ConsoleKey.sharesLeft: .int(sharesLeft),
        ]
    }
}

/// `GET containers/C/subscriptions/ENV`: every user's subscriptions, each with its user and
/// database.
public struct ConsoleSubscriptionList: WireBody {
    public struct Entry: WireBody {
        public var user: String
        public var database: String
        public var createdAt: Int64
        public var subscription: SubscriptionInput

        public init(user: String, database: String, createdAt: Int64, subscription: SubscriptionInput) {
            self.user = user
            self.database = database
            self.createdAt = createdAt
            self.subscription = subscription
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            user = try json.requiredString(ConsoleKey.user)
            database = try json.requiredString(ConsoleKey.database)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
            subscription = try SubscriptionInput(json: json.requiredObject(ConsoleKey.subscription))
        }

        public var json: JSON {
            [
                ConsoleKey.user: .string(user), ConsoleKey.database: .string(database), ConsoleKey.createdAt: .int(createdAt),
                ConsoleKey.subscription: subscription.json,
            ]
        }
    }

    public var subscriptions: [Entry]

    public init(subscriptions: [Entry]) { self.subscriptions = subscriptions }
    public init(json: ObjectReader) throws(CloudKitError) { subscriptions = try json.list(ConsoleKey.subscriptions) }
    public var json: JSON { [ConsoleKey.subscriptions: subscriptions.json] }
}

/// `POST containers/C/subscriptions/ENV/delete`: one subscription, deleted as its user would.
public struct ConsoleSubscriptionDeletion: WireBody, Hashable {
    public var user: String
    public var database: String
    public var subscriptionID: String

    public init(user: String, database: String, subscriptionID: String) {
        self.user = user
        self.database = database
        self.subscriptionID = subscriptionID
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        user = try json.requiredString(ConsoleKey.user)
        database = try json.requiredString(ConsoleKey.database)
        subscriptionID = try json.requiredString(ConsoleKey.subscriptionID)
    }

    public var json: JSON {
        [ConsoleKey.user: .string(user), ConsoleKey.database: .string(database), ConsoleKey.subscriptionID: .string(subscriptionID)]
    }
}

/// `GET containers/C/users/U`: one app user as an operator sees them.
public struct PersonView: WireBody {
    public struct Account: WireBody, Hashable {
        public var name: String
        public var createdAt: Int64
        public var disabled: Bool
        /// Nil when the user never joined this container.
        public var userRecordName: String?

        public init(name: String, createdAt: Int64, disabled: Bool, userRecordName: String?) {
            self.name = name
            self.createdAt = createdAt
            self.disabled = disabled
            self.userRecordName = userRecordName
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.requiredString(ConsoleKey.name)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
            disabled = try json.bool(ConsoleKey.disabled) ?? false
            userRecordName = try json.string(ConsoleKey.userRecordName)
        }

        public var json: JSON {
            var object: JSONObject = [ConsoleKey.name: .string(name), ConsoleKey.createdAt: .int(createdAt), ConsoleKey.disabled: .bool(disabled)]
            if let userRecordName { object[ConsoleKey.userRecordName] = .string(userRecordName) }
            return .object(object)
        }
    }

    /// A signed-in session, by the hash of its token (what revoking it names).
    public struct Session: WireBody, Hashable {
        public var session: String
        public var environment: String
        public var createdAt: Int64
        public var lastUsedAt: Int64

        public init(session: String, environment: String, createdAt: Int64, lastUsedAt: Int64) {
            self.session = session
            self.environment = environment
            self.createdAt = createdAt
            self.lastUsedAt = lastUsedAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            session = try json.requiredString(ConsoleKey.session)
            environment = try json.requiredString(ConsoleKey.environment)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
            lastUsedAt = try json.int(ConsoleKey.lastUsedAt) ?? 0
        }

        public var json: JSON {
            [
                ConsoleKey.session: .string(session), ConsoleKey.environment: .string(environment), ConsoleKey.createdAt: .int(createdAt),
                ConsoleKey.lastUsedAt: .int(lastUsedAt),
            ]
        }
    }

    /// A device's push token, shortened: how it is delivered and to which device.
    public struct PushToken: WireBody, Hashable {
        public var environment: String
        /// `web courier`, or `APNs` and its environment.
        public var delivery: String
        public var token: String
        public var deviceID: String
        public var createdAt: Int64

        public init(environment: String, delivery: String, token: String, deviceID: String, createdAt: Int64) {
            self.environment = environment
            self.delivery = delivery
            self.token = token
            self.deviceID = deviceID
            self.createdAt = createdAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            environment = try json.requiredString(ConsoleKey.environment)
            delivery = try json.requiredString(ConsoleKey.delivery)
            token = try json.requiredString(ConsoleKey.token)
            deviceID = try json.requiredString(ConsoleKey.deviceID)
            createdAt = try json.int(ConsoleKey.createdAt) ?? 0
        }

        public var json: JSON {
            [
                ConsoleKey.environment: .string(environment), ConsoleKey.delivery: .string(delivery), ConsoleKey.token: .string(token),
                ConsoleKey.deviceID: .string(deviceID), ConsoleKey.createdAt: .int(createdAt),
            ]
        }
    }

    /// The user's subscriptions in one database of one environment, as `subscriptions/list`
    /// answers them.
    public struct Subscriptions: WireBody {
        public var environment: String
        public var database: String
        public var list: SubscriptionsResponse

        public init(environment: String, database: String, list: SubscriptionsResponse) {
            self.environment = environment
            self.database = database
            self.list = list
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            environment = try json.requiredString(ConsoleKey.environment)
            database = try json.requiredString(ConsoleKey.database)
            list = try SubscriptionsResponse(json: json.requiredObject(ConsoleKey.list))
        }

        public var json: JSON {
            [ConsoleKey.environment: .string(environment), ConsoleKey.database: .string(database), ConsoleKey.list: list.json]
        }
    }

    public var user: Account
    public var sessions: [Session]
    public var pushTokens: [PushToken]
    /// Role names assigned, by environment.
    public var roles: [String: [String]]
    public var subscriptions: [Subscriptions]

    public init(user: Account, sessions: [Session], pushTokens: [PushToken], roles: [String: [String]], subscriptions: [Subscriptions]) {
        self.user = user
        self.sessions = sessions
        self.pushTokens = pushTokens
        self.roles = roles
        self.subscriptions = subscriptions
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        user = try Account(json: json.requiredObject(ConsoleKey.user))
        sessions = try json.list(ConsoleKey.sessions)
        pushTokens = try json.list(ConsoleKey.pushTokens)
        roles = [:]
        if let given = try json.object(ConsoleKey.roles) {
            for (environment, _) in given.object.pairs { roles[environment] = try given.stringArray(environment) ?? [] }
        }
        subscriptions = try json.list(ConsoleKey.subscriptions)
    }

    public var json: JSON {
        var roleObject = JSONObject()
        for (environment, names) in roles.sorted(by: { $0.key < $1.key }) { roleObject[environment] = .strings(names) }
        return [
            ConsoleKey.user: user.json, ConsoleKey.sessions: sessions.json, ConsoleKey.pushTokens: pushTokens.json,
            ConsoleKey.roles: .object(roleObject), ConsoleKey.subscriptions: subscriptions.json,
        ]
    }
}

/// `POST containers/C/users/U/sessions/revoke` `{session}`: one of the user's sessions.
public struct SessionRevocation: WireBody, Hashable {
    public var session: String

    public init(session: String) { self.session = session }
    public init(json: ObjectReader) throws(CloudKitError) { session = try json.requiredString(ConsoleKey.session) }
    public var json: JSON { [ConsoleKey.session: .string(session)] }
}

/// `POST containers/C/users/U/roles/ENV` `{role, assigned}`: a role given (or taken back).
public struct RoleAssignment: WireBody, Hashable {
    public var role: String
    public var assigned: Bool

    public init(role: String, assigned: Bool = true) {
        self.role = role
        self.assigned = assigned
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        role = try json.requiredString(ConsoleKey.role)
        assigned = try json.bool(ConsoleKey.assigned) ?? true
    }

    public var json: JSON { [ConsoleKey.role: .string(role), ConsoleKey.assigned: .bool(assigned)] }
}

/// `GET containers/C/usage/ENV`: storage used by the public database and by each member's
/// private one, against its quota, and what kept versions of records take.
public struct UsageReport: WireBody, Hashable {
    public struct Usage: WireBody, Hashable {
        /// The member's name; nil for the public database.
        public var name: String?
        public var usedBytes: Int64
        public var quotaBytes: Int64
        public var historyBytes: Int64

        public init(name: String?, usedBytes: Int64, quotaBytes: Int64, historyBytes: Int64) {
            self.name = name
            self.usedBytes = usedBytes
            self.quotaBytes = quotaBytes
            self.historyBytes = historyBytes
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            name = try json.string(ConsoleKey.name)
            usedBytes = try json.int(ConsoleKey.usedBytes) ?? 0
            quotaBytes = try json.int(ConsoleKey.quotaBytes) ?? 0
            historyBytes = try json.int(ConsoleKey.historyBytes) ?? 0
        }

        public var json: JSON {
            var object: JSONObject = [
                ConsoleKey.usedBytes: .int(usedBytes), ConsoleKey.quotaBytes: .int(quotaBytes), ConsoleKey.historyBytes: .int(historyBytes),
            ]
            if let name { object[ConsoleKey.name] = .string(name) }
            return .object(object)
        }
    }

    public var publicDatabase: Usage
    public var users: [Usage]

    public init(publicDatabase: Usage, users: [Usage]) {
        self.publicDatabase = publicDatabase
        self.users = users
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        publicDatabase = try Usage(json: json.requiredObject(ConsoleKey.publicDatabase))
        users = try json.list(ConsoleKey.users)
    }

    public var json: JSON { [ConsoleKey.publicDatabase: publicDatabase.json, ConsoleKey.users: users.json] }
}
