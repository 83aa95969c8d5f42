import ArgumentParser
import Foundation
import NimbusCore
import NimbusServer
import NimbusStorage
import NimbusWire

struct Containers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage containers.", subcommands: [Create.self, List.self, Set.self])

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change a container's settings: user discovery (on by default; each user still opts in) and self-service sign-up (off by default).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "on or off: whether users may be discovered at all.") var userDiscovery: String?
        @Option(help: "on or off: whether people may make their own accounts.") var signUp: String?

        static func setting(_ text: String, _ name: String) throws -> Bool {
            guard ["on", "off"].contains(text) else { throw ValidationError("--\(name) is on or off, not \(text)") }
            return text == "on"
        }

        func run() async throws {
            guard userDiscovery != nil || signUp != nil else { throw ValidationError("name a setting: --user-discovery or --sign-up") }
            do {
                let service = try await data.open().service
                if let userDiscovery {
                    try await service.setUserDiscovery(container: container, enabled: try Self.setting(userDiscovery, "user-discovery"))
                }
                if let signUp { try await service.setSignUp(container: container, enabled: try Self.setting(signUp, "sign-up")) }
                print("settings changed for \(container)")
            } catch { throw reportFailure(error) }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a container.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The container id, e.g. iCloud.com.example.App.") var id: String

        func run() async throws {
            do {
                try await data.open().service.createContainer(id: id)
                print(id)
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List containers.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            for container in try await data.open().service.containers() { print(container.id) }
        }
    }
}

struct Tokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage API tokens.", subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an API token; prints the token alone, so scripts can capture it.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "development"
        @Option(
            name: .customLong("allowed-origin"),
            help: "A web origin whose pages may use the token (https://app.example.com); repeat for several. Default: any (*).")
        var allowedOrigins: [String] = []
        @Option(help: "Where the sign-in page sends the browser after signing in, with ?ckWebAuthToken=… (CloudKit's Sign In Callback).")
        var signInCallback: String?
        @Option(help: "What the token is for ('iOS app'), shown by tokens list and the dashboard.") var name: String?

        func run() async throws {
            do {
                let token = try await data.open().service.createAPIToken(
                    container: container, environment: try parseEnvironment(environment),
                    allowedOrigins: allowedOrigins.isEmpty ? ["*"] : allowedOrigins, signInCallback: signInCallback, name: name)
                print(token)
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a container's API tokens, one a line, tab-separated: id, environment, name (- for none), made, last used (never), active or revoked. The tokens themselves are never kept, so never shown.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            do {
                func time(_ milliseconds: Int64) -> String {
                    Date(timeIntervalSince1970: Double(milliseconds) / 1000).formatted(.iso8601)
                }
                for token in try await data.open().service.apiTokens(container: container) {
                    let columns = [
                        token.id, token.environment.rawValue, token.name ?? "-", time(token.createdAt), token.lastUsedAt.map(time) ?? "never",
                        token.isRevoked ? "revoked" : "active",
                    ]
                    print(columns.joined(separator: "\t"))
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke one API token (--id, as tokens list shows it) or every token of a container (or of one environment).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "The one token to revoke, by the id tokens list shows.") var id: String?
        @Option(help: "development or production; both when omitted.") var environment: String?

        func validate() throws {
            if id != nil, environment != nil { throw ValidationError("--id names one token; --environment revokes every token of one: give one of them") }
        }

        func run() async throws {
            do {
                let service = try await data.open().service
                if let id {
                    let token = try await service.revokeAPIToken(container: container, id: id)
                    print("revoked \(token.id)\(token.name.map { " '\($0)'" } ?? "")")
                    return
                }
                let count = try await service.revokeAPITokens(container: container, environment: try environment.map(parseEnvironment))
                print("revoked \(count) token(s)")
            } catch { throw reportFailure(error) }
        }
    }
}

struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage server-to-server keys (docs/keys.md).", subcommands: [Add.self, List.self, Revoke.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register a P-256 public key for a container and environment; prints the key ID alone.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "development"
        @Option(help: "The public key, PEM (openssl ec -in key.pem -pubout > public.pem).") var publicKey: String

        func run() async throws {
            do {
                guard let pem = FileManager.default.contents(atPath: publicKey).map({ String(decoding: $0, as: UTF8.self) }) else {
                    throw ValidationError("cannot read --public-key \(publicKey)")
                }
                let key = try await data.open().service.addServerKey(
                    container: container, environment: try parseEnvironment(environment), publicKeyPEM: pem)
                print(key.keyID)
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a container's server-to-server keys.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            for key in try await data.open().service.serverKeys(container: container) {
                let created = Date(timeIntervalSince1970: Double(key.createdAt) / 1000).formatted(.iso8601)
                print("\(key.keyID)  \(key.environment.rawValue)  added \(created)\(key.isRevoked ? "  revoked" : "")")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a server-to-server key; what it signs is refused from then on.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The key ID (as keys add printed it).") var keyID: String

        func run() async throws {
            do {
                try await data.open().service.revokeServerKey(id: keyID)
                print("revoked \(keyID)")
            } catch { throw reportFailure(error) }
        }
    }
}

struct Roles: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the public database's security roles (docs/roles.md).",
        subcommands: [List.self, Create.self, Grant.self, Revoke.self, Assign.self])

    struct Scope: ParsableArguments {
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "development"
    }

    /// `create,read,write` as permissions.
    static func permissions(_ text: String) throws -> RecordPermissions {
        var permissions: RecordPermissions = []
        for word in text.split(separator: ",") {
            guard let permission = SecurityRoles.permission(named: word.trimmingCharacters(in: .whitespaces)) else {
                throw ValidationError("unknown permission '\(word)'; use create, read and write, separated by commas")
            }
            permissions.insert(permission)
        }
        guard !permissions.isEmpty else { throw ValidationError("name at least one of create, read, write") }
        return permissions
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the roles, each record type's grants, and who has which role.")
        @OptionGroup var data: DataOptions
        @OptionGroup var scope: Scope

        func run() async throws {
            do {
                let security = try await data.open().service.security(
                    container: scope.container, environment: try parseEnvironment(scope.environment))
                print("roles: \(security.roles.joined(separator: ", "))")
                for (recordType, grants) in security.grants.sorted(by: { $0.key < $1.key }) {
                    let granted = grants.sorted { $0.key < $1.key }.filter { !$0.value.isEmpty }
                        .map { "\($0.key) \(SecurityRoles.names($0.value))" }
                    print("\(recordType): \(granted.joined(separator: "; "))")
                }
                for (userID, roles) in security.assignments.sorted(by: { $0.key < $1.key }) {
                    print("user #\(userID): \(roles.sorted().joined(separator: ", "))")
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a custom role.")
        @OptionGroup var data: DataOptions
        @OptionGroup var scope: Scope
        @Argument(help: "The role's name: a letter, then letters, digits or _.") var name: String

        func run() async throws {
            do {
                try await data.open().service.createRole(
                    container: scope.container, environment: try parseEnvironment(scope.environment), name: name)
                print(name)
            } catch { throw reportFailure(error) }
        }
    }

    /// What `grant` and `revoke` change: a role's permissions on a record type.
    struct GrantChange: ParsableArguments {
        @OptionGroup var data: DataOptions
        @OptionGroup var scope: Scope
        @Argument(help: "The role: _world, _icloud, _creator or a custom one.") var role: String
        @Option(help: "The record type.") var recordType: String
        @Option(help: "Comma-separated: create, read, write.") var permissions: String

        func apply(granting: Bool) async throws {
            do {
                try await data.open().service.changeGrant(
                    container: scope.container, environment: try parseEnvironment(scope.environment), recordType: recordType,
                    role: role, permissions: try Roles.permissions(permissions), granting: granting)
                print("\(granting ? "granted" : "revoked") \(permissions) on \(recordType) \(granting ? "to" : "from") \(role)")
            } catch { throw reportFailure(error) }
        }
    }

    struct Grant: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let a role create, read or write a record type's records.")
        @OptionGroup var change: GrantChange
        func run() async throws { try await change.apply(granting: true) }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Take permissions on a record type back from a role.")
        @OptionGroup var change: GrantChange
        func run() async throws { try await change.apply(granting: false) }
    }

    struct Assign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Give a user a custom role (or take it back with --remove).")
        @OptionGroup var data: DataOptions
        @OptionGroup var scope: Scope
        @Argument(help: "The role.") var role: String
        @Option(help: "The user's name.") var user: String
        @Flag(help: "Take the role back.") var remove = false

        func run() async throws {
            do {
                try await data.open().service.assignRole(
                    container: scope.container, environment: try parseEnvironment(scope.environment), userName: user, role: role,
                    assigned: !remove)
                print(remove ? "\(user) no longer has \(role)" : "\(user) has \(role)")
            } catch { throw reportFailure(error) }
        }
    }
}

struct Providers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the OpenID Connect issuers a container accepts id tokens from (docs/identities.md).",
        subcommands: [Add.self, List.self, Remove.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Trust an issuer's id tokens (added again: replaced).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "The tokens' iss, exactly (Sign in with Apple: https://appleid.apple.com).") var issuer: String
        @Option(help: "The aud they must carry: the app's client ID (Sign in with Apple: its bundle or services ID).")
        var audience: String
        @Option(help: "The issuer's keys: a JWKS file or an http(s) URL (Apple: https://appleid.apple.com/auth/keys).")
        var jwks: String

        func run() async throws {
            do {
                try await data.open().service.addIdentityProvider(container: container, issuer: issuer, audience: audience, jwks: jwks)
                print("\(container) accepts id tokens of \(issuer) for \(audience)")
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a container's issuers.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            for provider in try await data.open().service.identityProviders(container: container) {
                print("\(provider.issuer)  audience \(provider.audience)  keys \(provider.jwksSource)")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop trusting an issuer.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "The issuer.") var issuer: String

        func run() async throws {
            do {
                try await data.open().service.removeIdentityProvider(container: container, issuer: issuer)
                print("removed \(issuer)")
            } catch { throw reportFailure(error) }
        }
    }
}

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage user accounts.",
        subcommands: [Create.self, List.self, Passwd.self, SignOut.self, Disable.self, Enable.self, Delete.self, Devices.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the accounts in the order they were made: name, created (UTC), email address, phone number, state.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            do {
                let service = try await data.open().service
                var after: Int64 = 0
                while true {
                    let page = try await service.users(afterID: after, limit: 1_000)
                    for (user, profile) in page {
                        print(
                            [
                                user.name, NimbusService.isoMoment(user.createdAt), profile.emailAddress ?? "-", profile.phoneNumber ?? "-",
                                user.isDisabled ? "disabled" : "active",
                            ]
                                .joined(separator: "\t"))
                    }
                    guard let last = page.last?.0.id, page.count == 1_000 else { break }
                    after = last
                }
            } catch { throw reportFailure(error) }
        }
    }

    /// The sync doctor (docs/sync-doctor.md) on the command line.
    struct Devices: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a user's devices and why one is not in step: how far behind it is in each zone, pushes it missed, tokens the store no longer honours.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment = "development"

        func run() async throws {
            do {
                guard let environment = NimbusStorage.Environment(rawValue: environment) else {
                    throw ValidationError("--environment must be development or production")
                }
                let report = try await data.open().service.deviceSyncReport(container: container, environment: environment, userName: name)
                if report.devices.isEmpty {
                    print("user \(name) has no device that fetched changes in \(container) (\(environment.rawValue)) within \(report.retentionDays) days")
                }
                for device in report.devices { print(Self.describe(device)) }
            } catch { throw reportFailure(error) }
        }

        static func describe(_ device: DeviceSyncReport.Device) -> String {
            func moment(_ value: Int64?) -> String { value.map(NimbusService.isoMoment) ?? "never" }
            var lines = ["device \(device.deviceID)\tlast seen \(moment(device.lastSeen))"]
            if let database = device.database {
                lines.append("  database feed\t\(database.status.rawValue)\tfetched \(moment(database.fetchedAt))")
            }
            for zone in device.zones {
                var state = zone.status.rawValue
                if let behind = zone.behind, behind > 0 { state += " by \(behind) change\(behind == 1 ? "" : "s")" }
                if let reason = zone.reason { state += ": \(reason)" }
                lines.append("  zone \(zone.zone)\t\(state)\tfetched \(moment(zone.fetchedAt))")
            }
            for zone in device.zonesNeverFetched { lines.append("  zone \(zone)\tnever fetched") }
            let push = device.push
            lines.append(
                "  pushes\t\(push.missed == 0 ? "none missed" : "\(push.missed) missed since \(moment(push.oldestMissedAt))")\tlast sent \(moment(push.lastSentAt))")
            return lines.joined(separator: "\n")
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set a user's password (8 to 1024 bytes) and sign them out on every device.",
            discussion: "The password comes from NIMBUS_USER_PASSWORD, or standard input when it is not set (process lists show arguments).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String

        func run() async throws {
            do {
                let environment = ProcessInfo.processInfo.environment["NIMBUS_USER_PASSWORD"]
                let password =
                    environment.flatMap { $0.isEmpty ? nil : $0 }
                    ?? String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                    .trimmingCharacters(in: .newlines)
                try await data.open().service.setUserPassword(name: name, password: password)
                print("user \(name): password set; signed out everywhere")
            } catch { throw reportFailure(error) }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a user account: a person others of an app may find (docs/identities.md).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String
        @Option(help: "The password (8 to 1024 bytes).") var password: String
        @Option(help: "The email address (unique among accounts).") var email: String?
        @Option(help: "The phone number with its country code, like +1 555 010 0100 (unique among accounts).") var phone: String?
        @Option(help: "Name parts.") var namePrefix: String?
        @Option var givenName: String?
        @Option var middleName: String?
        @Option var familyName: String?
        @Option var nameSuffix: String?
        @Option var nickname: String?

        func run() async throws {
            do {
                let names = NameComponents(
                    namePrefix: namePrefix, givenName: givenName, middleName: middleName, familyName: familyName,
                    nameSuffix: nameSuffix, nickname: nickname)
                let user = try await data.open().service.createUser(
                    name: name, password: password, profile: UserProfile(emailAddress: email, phoneNumber: phone, nameComponents: names))
                print(user.name)
            } catch { throw reportFailure(error) }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop a user from signing in and end their sessions on every device, keeping their data (enable undoes it).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String

        func run() async throws { try await Users.setDisabled(true, name, data) }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let a disabled user sign in again.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String

        func run() async throws { try await Users.setDisabled(false, name, data) }
    }

    static func setDisabled(_ disabled: Bool, _ name: String, _ data: DataOptions) async throws {
        do {
            try await data.open().service.setUserDisabled(name: name, disabled, by: "cli")
            print("user \(name) \(disabled ? "disabled; signed out everywhere" : "enabled")")
        } catch { throw reportFailure(error) }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a user's account and their own data in every container (private databases, subscriptions, places in shares, user record).",
            discussion: "Records they made in the public database stay. This cannot be undone: it wants --yes.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String
        @Flag(help: "Delete without asking again.") var yes = false

        func run() async throws {
            guard yes else {
                throw ValidationError(
                    "this deletes \(name)'s account and private data in every container and cannot be undone; run again with --yes")
            }
            do {
                let outcome = try await data.open().service.deleteUser(name: name, by: "cli")
                print(
                    "user \(name) deleted: \(outcome.zones) zone(s) in \(outcome.containers) container(s), \(outcome.subscriptions) subscription(s), left \(outcome.sharesLeft) share(s)")
            } catch { throw reportFailure(error) }
        }
    }

    struct SignOut: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "signout", abstract: "Revoke every session of a user.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The user name.") var name: String

        func run() async throws {
            do {
                let count = try await data.open().service.revokeSessions(userName: name)
                print("ended \(count) session(s)")
            } catch { throw reportFailure(error) }
        }
    }
}

struct Schema: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import, export, check and deploy schemas, set field indexes, take fields out of development and reset it.",
        subcommands: [
            Show.self, Export.self, Import.self, Check.self, Diff.self, Deploy.self, Index.self, Remove.self, ResetDevelopment.self,
        ])

    /// A schema file's text (`-`: standard input).
    static func readSchemaText(_ path: String) throws -> String {
        let data: Data
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            guard let read = FileManager.default.contents(atPath: path) else {
                throw CloudKitError.badRequest("cannot read the schema file \(path)")
            }
            data = read
        }
        guard let text = String(data: data, encoding: .utf8) else { throw CloudKitError.badRequest("\(path) is not UTF-8 text") }
        return text
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a schema file's roles, record types, fields, indexes and grants to the development schema.",
            discussion: """
                The file is in the CloudKit Schema Language, as `xcrun cktool export-schema` or `nimbus schema export` \
                writes it. Additive: nothing the file leaves out is removed, except indexes of system fields a listed \
                record type no longer names; a field whose type differs refuses the whole file. Production changes \
                only by `nimbus schema deploy`.
                """)
        @OptionGroup var data: DataOptions
        @Argument(help: "The schema file (.ckdb), or - for standard input.") var file: String
        @Option(help: "The container.") var container: String
        @Option(help: "Only development: production's schema changes by deploying.") var environment: String = "development"

        func run() async throws {
            do {
                guard try parseEnvironment(environment) == .development else {
                    throw CloudKitError.badRequest(
                        "a schema is imported into development; production gets it from `nimbus schema deploy --container \(container)`")
                }
                let schema = try SchemaFile(parsing: try Schema.readSchemaText(file))
                let service = try await data.open().service
                let outcome = try await service.importSchema(schema, container: container)
                try await service.audit(
                    "cli", "schema.import", container: container,
                    "development: \(outcome.newRecordTypes) new record type(s), \(outcome.newFields) new field(s), \(outcome.newRoles) new role(s)")
                print(
                    "imported into development: \(outcome.newRecordTypes) new record type(s), \(outcome.newFields) new field(s), \(outcome.newRoles) new role(s)")
            } catch { throw reportFailure(error) }
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a schema in the CloudKit Schema Language, as cktool writes it (`cktool import-schema` reads it).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "development"
        @Option(help: "The file to write; standard output without it.") var output: String?

        func run() async throws {
            do {
                let text = try await data.open().service.schemaLanguage(container: container, environment: try parseEnvironment(environment))
                if let output {
                    guard FileManager.default.createFile(atPath: output, contents: Data(text.utf8)) else {
                        throw CloudKitError.badRequest("cannot write \(output)")
                    }
                } else {
                    print(text, terminator: "")
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Exit 1, naming each difference, when an environment lacks a role, record type, field, index or grant a schema file declares.",
            discussion: """
                A step for an app's CI: the schema file the app ships with, against production, before a release:
                  nimbus schema check schema.ckdb --container iCloud.com.example --environment production
                Against a running server instead of a data directory, as an operator (password in NIMBUS_OPERATOR_PASSWORD):
                  nimbus schema check schema.ckdb --container iCloud.com.example --server https://nimbus.example.com --operator ci
                What the environment has beyond the file is not a difference.
                """)
        @OptionGroup var data: DataOptions
        @Argument(help: "The schema file (.ckdb), or - for standard input.") var file: String
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "production"
        @Option(help: "A running server's address; without it the data directory is read.") var server: String?
        @Option(name: .customLong("operator"), help: "The operator, with --server.") var operatorName: String?
        @Option(help: "The authenticator code, for an operator with a second factor.") var code: String?

        func run() async throws {
            let missing: [String]
            do {
                let environment = try parseEnvironment(self.environment)
                let text = try Schema.readSchemaText(file)
                let schema = try SchemaFile(parsing: text)  // a mistake in the file is named here, not by the server
                if let server {
                    missing = try await remote(server: server, text: text, environment: environment)
                } else {
                    missing = try await data.open().service.schemaDifferences(schema, container: container, environment: environment)
                }
            } catch { throw reportFailure(error) }
            guard missing.isEmpty else {
                print(missing.joined(separator: "\n"))
                FileHandle.standardError.write(
                    Data("nimbus: \(environment) lacks \(missing.count) thing(s) \(file) declares; deploy the schema first\n".utf8))
                throw ExitCode.failure
            }
            print("\(environment) has everything \(file) declares")
        }

        private func remote(server: String, text: String, environment: Environment) async throws -> [String] {
            guard let operatorName else { throw CloudKitError.badRequest("--server needs --operator (and NIMBUS_OPERATOR_PASSWORD)") }
            guard let password = ProcessInfo.processInfo.environment["NIMBUS_OPERATOR_PASSWORD"], !password.isEmpty else {
                throw CloudKitError.badRequest("set NIMBUS_OPERATOR_PASSWORD to the operator's password")
            }
            let body = String(decoding: SchemaText(text: text).json.serialized(), as: UTF8.self)
            let path = "containers/\(container)/schema/\(environment.rawValue)/check"
            let answer = try await Admin.call(
                server: server, operatorName: operatorName, code: code, password: password, verb: "POST", path: path, body: body)
            let json = try? JSON.parse(Array(answer.text.utf8))
            guard answer.status == 200, let json, let check = try? SchemaCheckAnswer(body: json) else {
                let reason = json.flatMap { CloudKitError(json: $0)?.reason } ?? answer.text
                throw CloudKitError.badRequest("\(server) answered HTTP \(answer.status): \(reason)")
            }
            return check.missing
        }
    }

    struct Index: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set a field's indexes (QUERYABLE, SORTABLE, SEARCHABLE); `--set none` drops them all.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "development"
        @Option(help: "The record type.") var recordType: String
        @Option(help: "The field, or a system field such as ___createTime.") var field: String
        @Option(help: "Comma-separated: queryable, sortable, searchable, or none.") var set: String

        func run() async throws {
            var flags = 0
            for name in set.lowercased().split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where name != "none" {
                guard let flag = SchemaFile.indexFlag(named: name) else {
                    throw ValidationError("unknown index '\(name)'; use queryable, sortable, searchable or none")
                }
                flags |= flag
            }
            do {
                let found = try await data.open().service.setFieldIndexes(
                    container: container, environment: try parseEnvironment(environment), recordType: recordType,
                    field: field, indexes: flags)
                guard found else { throw CloudKitError.badRequest("\(recordType).\(field) is not in the \(environment) schema") }
                print("\(recordType).\(field): \(set)")
            } catch { throw reportFailure(error) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a schema in the CloudKit Schema Language.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "development or production.") var environment: String = "development"

        func run() async throws {
            let service = try await data.open().service
            print(try await service.schemaLanguage(container: container, environment: try parseEnvironment(environment)), terminator: "")
        }
    }

    struct Deploy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Copy the development schema to production.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            do {
                let added = try await data.open().service.deploySchema(container: container)
                print(
                    "deployed: \(added.recordTypes) new record type(s), \(added.fields) new field(s), \(added.roles) new role(s) in production")
            } catch { throw reportFailure(error) }
        }
    }

    struct Diff: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print what deploying development to production would change, and what would refuse it; exits 1 when refused.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            let plan: NimbusService.SchemaDeployPlan
            do { plan = try await data.open().service.schemaDeployPlan(container: container) } catch { throw reportFailure(error) }
            let field = { (f: SchemaFieldRow) in
                "\(f.recordType).\(f.fieldName) \(f.fieldType)" + (f.indexes == 0 ? "" : " (\(SchemaFile.indexNames(f.indexes).joined(separator: ", ")))")
            }
            var lines: [String] = []
            lines += plan.conflicts.map { "conflict: \($0)" }
            lines += plan.newRecordTypes.map { "new record type: \($0)" }
            lines += plan.newFields.map { "new field: \(field($0))" }
            lines += plan.newIndexes.map { "new index: \(field($0))" }
            lines += plan.newRoles.map { "new role: \($0)" }
            lines += plan.changedGrants.map {
                "grant: \($0.recordType) \($0.role) \($0.permissions.isEmpty ? "none" : SecurityRoles.names($0.permissions))"
            }
            lines += plan.keptFields.map { "kept in production: \(field($0))" }
            print(lines.isEmpty ? "production has everything development has" : lines.joined(separator: "\n"))
            if !plan.conflicts.isEmpty { throw ExitCode.failure }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Take a field (or, without --field, a record type) out of the development schema; refused while records hold values.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "The record type.") var recordType: String
        @Option(help: "The field; none: the whole record type.") var field: String?

        func run() async throws {
            do {
                let service = try await data.open().service
                try await service.removeFromDevelopmentSchema(container: container, recordType: recordType, field: field)
                let what = field.map { "field \(recordType).\($0)" } ?? "record type \(recordType)"
                try await service.audit("cli", "schema.remove", container: container, "development: \(what)")
                print("removed \(what) from development")
            } catch { throw reportFailure(error) }
        }
    }

    struct ResetDevelopment: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reset-development",
            abstract: "Delete every development record, zone and subscription of a container; its schema becomes production's.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "The container's identifier again, to confirm.") var confirm: String

        func run() async throws {
            guard confirm == container else {
                throw reportFailure(CloudKitError.badRequest("--confirm must repeat the container's identifier; nothing was reset"))
            }
            do {
                let service = try await data.open().service
                let outcome = try await service.resetDevelopment(container: container)
                try await service.audit(
                    "cli", "environment.reset", container: container,
                    "development reset: \(outcome.zones) zone(s) in \(outcome.databases) database(s), \(outcome.subscriptions) subscription(s) removed; schema is production's")
                print(
                    "development reset: \(outcome.zones) zone(s) in \(outcome.databases) database(s) and \(outcome.subscriptions) subscription(s) removed; the schema is production's")
            } catch { throw reportFailure(error) }
        }
    }
}

struct APNs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns", abstract: "Manage a container's Apple Push Notification service credentials.",
        subcommands: [Set.self, Show.self, Remove.self])

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store the APNs token-signing key (.p8) for a container; a running server uses it within 30 seconds.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String
        @Option(help: "Your Apple developer team ID (10 characters).") var teamID: String
        @Option(help: "The key's ID (10 characters), shown beside it on Apple's developer site.") var keyID: String
        @Option(help: "The app's bundle ID, sent as apns-topic.") var topic: String
        @Option(help: "The .p8 file Apple's developer site gave for the key.") var keyFile: String

        func run() async throws {
            do {
                guard let pem = FileManager.default.contents(atPath: keyFile).map({ String(decoding: $0, as: UTF8.self) }) else {
                    throw ValidationError("cannot read --key-file \(keyFile)")
                }
                try await data.open().service.setAPNsCredentials(
                    container: container, teamID: teamID, keyID: keyID, topic: topic, privateKeyPEM: pem)
                print("APNs credentials stored for \(container) (team \(teamID), key \(keyID), topic \(topic))")
            } catch { throw reportFailure(error) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a container's APNs team, key ID and topic (never the key).")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            guard let credentials = try await data.open().service.apnsCredentials(container: container) else {
                print("no APNs credentials for \(container)")
                return
            }
            print("team \(credentials.teamID), key \(credentials.keyID), topic \(credentials.topic)")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a container's APNs credentials; pushes to APNs stop.")
        @OptionGroup var data: DataOptions
        @Option(help: "The container.") var container: String

        func run() async throws {
            let removed = try await data.open().service.removeAPNsCredentials(container: container)
            print(removed ? "removed APNs credentials for \(container)" : "no APNs credentials for \(container)")
        }
    }
}

struct Operators: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the dashboard's operators (docs/dashboard.md).",
        subcommands: [Create.self, List.self, SetAccess.self, Disable.self, Enable.self, Delete.self, Passwd.self, ClearSecondFactor.self])

    struct SetAccess: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change an operator's role or containers (never the last administrator of every container's).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name.") var name: String
        @Option(help: "administrator or read-only.") var role: String?
        @Option(name: .customLong("container"), help: "A container the operator may see (repeat for more).") var containers: [String] = []
        @Flag(help: "Every container, now and future.") var everyContainer = false

        func validate() throws {
            if everyContainer, !containers.isEmpty { throw ValidationError("--container limits the operator; --every-container lifts the limit: give one") }
            if role == nil, containers.isEmpty, !everyContainer { throw ValidationError("say what changes: --role, --container or --every-container") }
        }

        func run() async throws {
            do {
                let role = try role.map { name in
                    guard let role = OperatorRole(rawValue: name) else { throw ValidationError("--role is administrator or read-only, not '\(name)'") }
                    return role
                }
                let row = try await data.open().service.updateOperator(
                    name: name, role: role, containers: everyContainer ? .some(nil) : containers.isEmpty ? nil : .some(containers), by: "cli")
                print("operator \(row.name): \(row.role.rawValue), \(row.containers?.joined(separator: ",") ?? "every container")")
            } catch { throw reportFailure(error) }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop an operator from signing in and end its sessions, keeping its account (enable undoes it).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name.") var name: String

        func run() async throws { try await Operators.setDisabled(true, name, data) }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let a disabled operator sign in again.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name.") var name: String

        func run() async throws { try await Operators.setDisabled(false, name, data) }
    }

    static func setDisabled(_ disabled: Bool, _ name: String, _ data: DataOptions) async throws {
        do {
            _ = try await data.open().service.updateOperator(name: name, disabled: disabled, by: "cli")
            print("operator \(name) \(disabled ? "disabled; its sessions ended" : "enabled")")
        } catch { throw reportFailure(error) }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an operator and end its sessions (never the last administrator of every container).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name.") var name: String

        func run() async throws {
            do {
                try await data.open().service.deleteOperator(name: name, by: "cli")
                print("operator \(name) deleted")
            } catch { throw reportFailure(error) }
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give an operator a new one-time password (printed once) and end its sessions.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name.") var name: String

        func run() async throws {
            do {
                let password = try await data.open().service.resetOperatorPassword(name: name, by: "cli")
                print("operator \(name); one-time password: \(password)")
            } catch { throw reportFailure(error) }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an operator and print its one-time password (shown once).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name (letters, digits, '.', '_', '-').") var name: String
        @Flag(help: "Sees everything it may see and changes nothing.") var readOnly = false
        @Option(name: .customLong("container"), help: "A container the operator may see (repeat for more); none: every container.")
        var containers: [String] = []

        func run() async throws {
            do {
                let (row, password) = try await data.open().service.createOperator(
                    name: name, role: readOnly ? .readOnly : .administrator, containers: containers.isEmpty ? nil : containers, by: "cli")
                print("operator \(row.name) (\(row.role.rawValue)); valid 24 hours, to choose their own password at first sign-in; one-time password: \(password)")
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the operators.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            do {
                for row in try await data.open().service.operators() {
                    let condition =
                        row.disabled ? "disabled" : row.passwordExpiresAt != nil ? "one-time password" : "active"
                    print(
                        "\(row.name)\t\(row.role.rawValue)\t\(row.containers?.joined(separator: ",") ?? "every container")\t\(condition)"
                            + (row.secondFactor != nil ? "\tsecond factor" : ""))
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct ClearSecondFactor: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Turn off an operator's second factor (a lost phone); the password alone signs in until it is set up again.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The operator's name.") var name: String

        func run() async throws {
            do {
                try await data.open().service.clearSecondFactor(operatorName: name, by: "cli")
                print("operator \(name): second factor cleared")
            } catch { throw reportFailure(error) }
        }
    }
}
