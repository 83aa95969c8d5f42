import Foundation
import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// The dashboard's console: an app's schema, data, people, and the request log, under
/// `/admin/1/` beside `AdminRoutes` (docs/dashboard.md has the table). Reads are GETs, except
/// data reads, which take CloudKit's request bodies; every POST carries the CSRF token.
///
/// | path | what |
/// |---|---|
/// | `containers/{c}/schema/{env}` | GET: record types, fields, indexes, grants; roles |
/// | `containers/{c}/schema/{env}/export` | GET: the schema file (CloudKit Schema Language) |
/// | `containers/{c}/schema/development/import` | POST `{text}`: adds a schema file to development |
/// | `containers/{c}/schema/development/fields` | POST `{recordType, field, type, indexes}`: adds a field (and its type) |
/// | `containers/{c}/schema/development/remove` | POST `{recordType, field?}`: takes a field (or the type) out, when no record holds values |
/// | `containers/{c}/reset/development` | POST `{confirm: c}`: deletes development's data, schema becomes production's |
/// | `containers/{c}/schema/{env}/indexes` | POST `{recordType, field, indexes: [..]}` |
/// | `containers/{c}/schema/deploy` | GET: the diff; POST: deploys |
/// | `containers/{c}/roles/{env}` | POST `{name}`: a custom role |
/// | `containers/{c}/grants/{env}` | POST `{recordType, role, permissions: [..], granting}` |
/// | `containers/{c}/data/{env}/{database}/{zones/list, zones/modify, records/query, records/lookup, records/modify, assets/upload}` | CloudKit's bodies; `?user=` for a private or shared database |
/// | `containers/{c}/users` | GET `?after=&limit=`: members |
/// | `containers/{c}/subscriptions/{env}` | GET: every user's subscriptions, with user and database |
/// | `containers/{c}/subscriptions/{env}/delete` | POST `{user, database, subscriptionID}`: deletes one as its user would |
/// | `containers/{c}/users/{name}` | GET: sessions, roles, push tokens, subscriptions |
/// | `containers/{c}/users` | POST `{name, password, email?}`: an app user's account |
/// | `containers/{c}/users/{name}/password` | POST `{password}`: set, and signed out everywhere |
/// | `containers/{c}/users/{name}/sessions/revoke` | POST `{session}` |
/// | `containers/{c}/users/{name}/roles/{env}` | POST `{role, assigned}` |
/// | `containers/{c}/usage/{env}` | GET: storage of the public database and of each member's private one, with quotas and kept versions |
/// | `containers/{c}/time-travel/{env}` | POST `{to, user?, zone?, apply?}`: a zone or a user back to a moment (`TimeTravelRoutes`) |
/// | `requests` | GET `?user=&error=&container=&limit=`: the request log |
/// | `metrics` | GET: requests, p50/p99 and errors by code per minute, last hour |
enum ConsoleRoutes {
    static func add(to routes: OperatorRoutes, parts: ServerParts) {
        addSchemaRoutes(to: routes, parts: parts)
        addDataRoutes(to: routes, parts: parts)
        addPeopleRoutes(to: routes, parts: parts)
        addLogRoutes(to: routes, parts: parts)
    }

    // MARK: Helpers

    static func container(_ context: NimbusRequestContext) -> String { context.parameter("container") ?? "" }

    static func environment(_ context: NimbusRequestContext) throws -> NimbusStorage.Environment {
        try environment(named: context.parameter("environment") ?? "")
    }

    static func environment(named name: String) throws -> NimbusStorage.Environment {
        guard let environment = NimbusStorage.Environment(rawValue: name) else {
            throw CloudKitError.badRequest("environment: '\(Names.escaped(name))' is not development or production")
        }
        return environment
    }

    /// Schema changes other than indexes are made in development, then deployed.
    static func requireDevelopment(_ context: NimbusRequestContext) throws {
        guard try environment(context) == .development else {
            throw CloudKitError.badRequest(
                "the production schema changes only by deploying development (or by setting an index); change development, then deploy")
        }
    }

    static func body(_ request: Request, _ context: NimbusRequestContext, _ parts: ServerParts) async throws -> ObjectReader {
        try await RouteInput(request: request, context: context, parts: parts).body()
    }

    static func indexFlags(_ names: [String]) throws -> Int {
        try names.reduce(0) { flags, name in
            guard let flag = SchemaFile.indexFlag(named: name) else {
                throw CloudKitError.badRequest("indexes: '\(Names.escaped(name))' is not QUERYABLE, SORTABLE or SEARCHABLE")
            }
            return flags | flag
        }
    }

    static func scope(named name: String) throws -> DatabaseScope {
        guard let scope = DatabaseScope(rawValue: name) else {
            throw CloudKitError.badRequest("database: '\(Names.escaped(name))' is not public, private or shared")
        }
        return scope
    }

    static func permissions(_ names: [String]) throws -> RecordPermissions {
        try names.reduce(into: RecordPermissions()) { permissions, name in
            guard let permission = SecurityRoles.permission(named: name) else {
                throw CloudKitError.badRequest("permissions: '\(Names.escaped(name))' is not CREATE, READ or WRITE")
            }
            permissions.insert(permission)
        }
    }

    // MARK: Schema

    static func addSchemaRoutes(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        routes.get("containers/:container/schema/deploy", needs: .sightOfContainer) { request, context, operatorContext in
            let plan = try await service.schemaDeployPlan(container: container(context))
            func field(_ row: SchemaFieldRow) -> SchemaFieldEntry {
                SchemaFieldEntry(
                    recordType: row.recordType, field: row.fieldName, type: row.fieldType, indexes: SchemaFile.indexNames(row.applicableIndexes))
            }
            return Reply.json(
                DeployPlan(
                    newRecordTypes: plan.newRecordTypes, newFields: plan.newFields.map(field), newIndexes: plan.newIndexes.map(field),
                    keptFields: plan.keptFields.map(field), conflicts: plan.conflicts, newRoles: plan.newRoles,
                    changedGrants: plan.changedGrants.map {
                        RoleGrant(recordType: $0.recordType, role: $0.role, permissions: SecurityRoles.nameList($0.permissions))
                    }
                ).json, context: context)
        }
        routes.post("containers/:container/schema/deploy", needs: .changeOfContainer) { request, context, operatorContext in
            let added = try await service.deploySchema(container: container(context))
            try await service.audit(
                operatorContext.account.name, "schema.deploy", container: container(context),
                "development → production: \(added.recordTypes) new record type(s), \(added.fields) new field(s), \(added.roles) new role(s)")
            return Reply.json(SchemaAdditions(recordTypes: added.recordTypes, fields: added.fields, roles: added.roles).json, context: context)
        }
        routes.get("containers/:container/schema/:environment", needs: .sightOfContainer) { request, context, operatorContext in
            let environment = try environment(context)
            let schema = try await service.schema(container: container(context), environment: environment)
            let security = try await service.security(container: container(context), environment: environment)
            let types = schema.recordTypes.map { name in
                SchemaView.RecordType(
                    name: name,
                    fields: schema.fields.filter { $0.recordType == name }.map {
                        .init(
                            name: $0.fieldName, type: $0.fieldType, indexes: SchemaFile.indexNames($0.applicableIndexes),
                            applicableIndexes: SchemaFile.indexNames(FieldType.applicableIndexes(wireName: $0.fieldType)))
                    },
                    grants: (security.grants[name] ?? [:]).mapValues(SecurityRoles.nameList))
            }
            let refusals = environment == .production
                ? try await service.productionSchemaRefusals(container: container(context)).map {
                    SchemaView.Refusal(missing: $0.missing, count: $0.count, lastAt: $0.lastAt)
                } : nil
            return Reply.json(SchemaView(recordTypes: types, roles: security.roles, refusedWrites: refusals).json, context: context)
        }
        routes.get("containers/:container/schema/:environment/export", needs: .sightOfContainer) { request, context, operatorContext in
            let text = try await service.schemaLanguage(container: container(context), environment: try environment(context))
            var response = Reply.bytes(Array(text.utf8), contentType: "text/plain; charset=utf-8", context: context)
            response.headers[.contentDisposition] = "attachment; filename=\"schema-\(try environment(context).rawValue).ckdb\""
            return response
        }
        routes.post("containers/:container/schema/:environment/import", needs: .changeOfContainer) { request, context, operatorContext in
            try requireDevelopment(context)
            let file = try SchemaFile(parsing: try SchemaText(json: try await body(request, context, parts)).text)
            let outcome = try await service.importSchema(file, container: container(context))
            try await service.audit(
                operatorContext.account.name, "schema.import", container: container(context),
                "development: \(outcome.newRecordTypes) new record type(s), \(outcome.newFields) new field(s), \(outcome.newRoles) new role(s)")
            return Reply.json(
                SchemaAdditions(recordTypes: outcome.newRecordTypes, fields: outcome.newFields, roles: outcome.newRoles).json, context: context)
        }
        // What a schema file declares that the environment lacks (`nimbus schema check`); a
        // question, so sight of the container is enough.
        routes.post("containers/:container/schema/:environment/check", needs: .sightOfContainer) { request, context, operatorContext in
            let file = try SchemaFile(parsing: try SchemaText(json: try await body(request, context, parts)).text)
            let missing = try await service.schemaDifferences(file, container: container(context), environment: try environment(context))
            return Reply.json(SchemaCheckAnswer(missing: missing).json, context: context)
        }
        routes.post("containers/:container/schema/:environment/fields", needs: .changeOfContainer) { request, context, operatorContext in
            try requireDevelopment(context)
            let input = try await body(request, context, parts)
            let addition = try SchemaFieldEntry(json: input)
            let (recordType, field) = (addition.recordType, addition.field)
            guard let typeName = addition.type else { throw input.missing(ConsoleKey.type) }
            try Names.validateIdentifier(recordType, kind: "record type", path: ConsoleKey.recordType)
            try Names.validateIdentifier(field, kind: "field name", path: ConsoleKey.field)
            guard case .exact(let type)? = DeclaredFieldType(wire: typeName) else {
                throw CloudKitError.badRequest("type: '\(Names.escaped(typeName))' is not a field type (STRING, INT64, STRING_LIST, …)")
            }
            let indexes = try indexFlags(addition.indexes)
            let schema = try await service.schema(container: container(context), environment: .development)
            if let existing = schema.fields.first(where: { $0.recordType == recordType && $0.fieldName == field }), existing.fieldType != type.wireName {
                throw CloudKitError.badRequest(
                    "\(recordType).\(field) is \(existing.fieldType) in development already; a field's type cannot change (records hold \(existing.fieldType) values): add a field of another name")
            }
            var added = SchemaFile.RecordType(
                name: recordType, fields: [SchemaFieldRow(recordType: recordType, fieldName: field, fieldType: type.wireName, indexes: indexes)])
            added.listsSystemIndexes = false
            let file = SchemaFile(recordTypes: [added])
            if indexes != 0, type.isEncrypted {
                throw CloudKitError.badRequest("field '\(field)' is encrypted (\(type.wireName)): the server cannot read it, so it can have no index")
            }
            let outcome = try await service.importSchema(file, container: container(context))
            try await service.audit(
                operatorContext.account.name, "schema.field", container: container(context),
                "development: \(recordType).\(field) \(type.wireName)\(outcome.newRecordTypes > 0 ? " (new record type)" : "")")
            return Reply.json(FieldAdded(added: outcome.newFields > 0).json, context: context)
        }
        routes.post("containers/:container/schema/:environment/remove", needs: .changeOfContainer) { request, context, operatorContext in
            try requireDevelopment(context)
            let removal = try SchemaRemoval(json: try await body(request, context, parts))
            let (recordType, field) = (removal.recordType, removal.field)
            try await service.removeFromDevelopmentSchema(container: container(context), recordType: recordType, field: field)
            try await service.audit(
                operatorContext.account.name, "schema.remove", container: container(context),
                "development: \(field.map { "field \(recordType).\($0)" } ?? "record type \(recordType)")")
            return Reply.json(SchemaRemoved().json, context: context)
        }
        routes.post("containers/:container/reset/:environment", needs: .changeOfContainer) { request, context, operatorContext in
            guard try environment(context) == .development else {
                throw CloudKitError.badRequest("only the development environment can be reset; production holds your users' data")
            }
            guard try DevelopmentResetConfirmation(json: try await body(request, context, parts)).confirm == container(context) else {
                throw CloudKitError.badRequest(
                    "resetting deletes every development record: send confirm with the container's identifier to go ahead")
            }
            let outcome = try await service.resetDevelopment(container: container(context))
            try await service.audit(
                operatorContext.account.name, "environment.reset", container: container(context),
                "development reset: \(outcome.zones) zone(s) in \(outcome.databases) database(s), \(outcome.subscriptions) subscription(s) removed; schema is production's")
            return Reply.json(
                DevelopmentResetOutcome(databases: outcome.databases, zones: outcome.zones, subscriptions: outcome.subscriptions).json,
                context: context)
        }
        routes.post("containers/:container/schema/:environment/indexes", needs: .changeOfContainer) { request, context, operatorContext in
            let environment = try environment(context)
            let change = try SchemaFieldEntry(json: try await body(request, context, parts))
            let (recordType, field) = (change.recordType, change.field)
            let flags = try indexFlags(change.indexes)
            guard
                try await service.setFieldIndexes(
                    container: container(context), environment: environment, recordType: recordType, field: field, indexes: flags)
            else {
                throw CloudKitError(.notFound, "\(Names.escaped(recordType)).\(Names.escaped(field)) is not in the \(environment.rawValue) schema")
            }
            let names = SchemaFile.indexNames(flags)
            try await service.audit(
                operatorContext.account.name, "schema.indexes", container: container(context),
                "\(environment.rawValue): \(recordType).\(field) \(names.isEmpty ? "no index" : names.joined(separator: ", "))")
            return Reply.json(FieldIndexes(indexes: names).json, context: context)
        }
        routes.post("containers/:container/roles/:environment", needs: .changeOfContainer) { request, context, operatorContext in
            let name = try RoleCreation(json: try await body(request, context, parts)).name
            try await service.createRole(container: container(context), environment: try environment(context), name: name)
            try await service.audit(
                operatorContext.account.name, "roles.create", container: container(context), "\(try environment(context).rawValue): role \(name)")
            return Reply.json(RoleChanged(role: name).json, context: context)
        }
        routes.post("containers/:container/grants/:environment", needs: .changeOfContainer) { request, context, operatorContext in
            let change = try RoleGrant(json: try await body(request, context, parts))
            let (recordType, role, granting) = (change.recordType, change.role, change.granting)
            let granted = try permissions(change.permissions)
            try await service.changeGrant(
                container: container(context), environment: try environment(context), recordType: recordType, role: role,
                permissions: granted, granting: granting)
            try await service.audit(
                operatorContext.account.name, granting ? "roles.grant" : "roles.revoke", container: container(context),
                "\(try environment(context).rawValue): \(SecurityRoles.names(granted)) on \(recordType) \(granting ? "to" : "from") \(role)")
            return Reply.json(RoleChanged(role: role).json, context: context)
        }
    }

    // MARK: Data

    static func addDataRoutes(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        /// What each data call does, and whether it changes anything.
        let calls: [(path: String, changes: Bool, run: @Sendable (DatabaseTarget, ObjectReader) async throws -> JSON)] = [
            ("zones/list", false, { target, _ in try await service.listZones(target).json }),
            ("zones/modify", true, { target, body in try await service.modifyZones(target, ZonesModifyRequest(json: body)).json }),
            ("records/query", false, { target, body in try await service.queryRecords(target, RecordsQueryRequest(json: body)).json }),
            ("records/lookup", false, { target, body in try await service.lookupRecords(target, RecordsLookupRequest(json: body)).json }),
            ("records/modify", true, { target, body in try await service.modifyRecords(target, RecordsModifyRequest(json: body)).json }),
            ("subscriptions/list", false, { target, _ in try await service.listSubscriptions(target).json }),
            // The record editor's uploads: a token as apps get one; the bytes then go to its URL.
            ("assets/upload", true, { target, body in try await service.requestAssetUploads(target, AssetUploadRequest(json: body)).json }),
        ]
        for call in calls {
            routes.post(RouterPath("containers/:container/data/:environment/:database/\(call.path)")) { request, context, operatorContext in
                let scope = try scope(named: context.parameter("database") ?? "")
                let userName = request.query("user").flatMap { $0.isEmpty ? nil : $0 }
                let target = try await service.consoleTarget(
                    container: container(context), environment: try environment(context), scope: scope, userName: userName,
                    as: operatorContext, changing: call.changes, baseURL: context.exchange.baseURL(for: request))
                var answer = try await call.run(target, try await body(request, context, parts))
                if call.path.hasPrefix("records/") {
                    answer = namingOperators(in: answer, try await service.operatorStamps(container: container(context)))
                }
                // Reading someone's own databases, and any change, is on the record.
                if call.changes || scope != .public {
                    try await service.audit(
                        operatorContext.account.name, call.changes ? "data.change" : "data.read", container: container(context),
                        "\(try environment(context).rawValue) \(scope.rawValue) database\(userName.map { " of \($0)" } ?? ""): \(call.path)")
                }
                return Reply.json(answer, context: context)
            }
        }
    }

    /// Records' `created` and `modified` stamps that are an operator's get `"operator": NAME`
    /// beside the record name, so the page can say who (review defect 24).
    static func namingOperators(in answer: JSON, _ stamps: [String: String]) -> JSON {
        // The records' answer is text written straight from the records (`StreamedWireBody`):
        // read as the values it holds.
        guard case .object(var body) = answer.parsed, case .array(let records)? = body[WireKey.records]?.parsed else { return answer }
        body[WireKey.records] = .array(
            records.map { record in
                guard case .object(var object) = record.parsed else { return record }
                for key in [WireKey.created, WireKey.modified] {
                    guard case .object(var stamp)? = object[key]?.parsed, let name = stamp[WireKey.userRecordName]?.stringValue, let who = stamps[name]
                    else { continue }
                    stamp[ConsoleKey.operatorAccount] = .string(who)
                    object[key] = .object(stamp)
                }
                return .object(object)
            })
        return .object(body)
    }

    // MARK: People

    static func addPeopleRoutes(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        routes.get("containers/:container/users") { request, context, operatorContext in
            let members = try await service.members(
                container: container(context), after: request.query("after").flatMap(Int64.init) ?? 0,
                limit: request.query("limit").flatMap(Int.init) ?? 50, as: operatorContext)
            let rows = members.map { member in
                let names = member.entry.profile.nameComponents
                let fullName = [names.givenName, names.familyName].compactMap { $0 }.joined(separator: " ")
                return MemberList.Member(
                    name: member.userName, userID: member.entry.member.userID, userRecordName: member.entry.member.userRecordName,
                    joinedAt: member.entry.member.joinedAt, discoverable: member.entry.member.discoverable ?? false,
                    email: member.entry.profile.emailAddress, phone: member.entry.profile.phoneNumber, fullName: fullName.isEmpty ? nil : fullName)
            }
            return Reply.json(MemberList(users: rows).json, context: context)
        }
        // App users' accounts, made and reset by an administrator of every container (accounts
        // serve every container; the path's container is where the page was).
        routes.post("containers/:container/users") { request, context, operatorContext in
            let creation = try UserCreation(json: try await body(request, context, parts))
            let row = try await service.createUser(
                name: creation.name, password: creation.password, emailAddress: creation.email, as: operatorContext)
            return Reply.json(UserAccountChanged(name: row.name).json, context: context)
        }
        routes.post("containers/:container/users/:user/password") { request, context, operatorContext in
            let name = context.parameter("user") ?? ""
            let given = try UserPassword(json: try await body(request, context, parts))
            try await service.setUserPassword(name: name, password: given.password, as: operatorContext)
            return Reply.json(UserAccountChanged(name: name, signedOut: true).json, context: context)
        }
        // `{"disabled": true|false}`, as `POST operators/{name}` changes an operator.
        routes.post("containers/:container/users/:user") { request, context, operatorContext in
            let name = context.parameter("user") ?? ""
            let disabled = try UserDisabling(json: try await body(request, context, parts)).disabled
            try await service.setUserDisabled(name: name, disabled, as: operatorContext)
            return Reply.json(UserAccountChanged(name: name, disabled: disabled).json, context: context)
        }
        routes.post("containers/:container/users/:user/delete") { request, context, operatorContext in
            let outcome = try await service.deleteUser(name: context.parameter("user") ?? "", as: operatorContext)
            return Reply.json(
                UserDeletionOutcome(
                    containers: outcome.containers, zones: outcome.zones, subscriptions: outcome.subscriptions, sharesLeft: outcome.sharesLeft
                ).json, context: context)
        }
        // The sync doctor (docs/sync-doctor.md): the user's devices and why one is not in step.
        routes.get("containers/:container/users/:user/devices/:environment", needs: .sightOfContainer) { request, context, operatorContext in
            let report = try await service.deviceSyncReport(
                container: container(context), environment: try environment(context), userName: context.parameter("user") ?? "")
            return Reply.json(report.json, context: context)
        }
        routes.get("containers/:container/subscriptions/:environment") { request, context, operatorContext in
            let list = try await service.subscriptions(
                container: container(context), environment: try environment(context), as: operatorContext)
            let rows = list.map {
                ConsoleSubscriptionList.Entry(user: $0.userName, database: $0.scope.rawValue, createdAt: $0.createdAt, subscription: $0.subscription)
            }
            return Reply.json(ConsoleSubscriptionList(subscriptions: rows).json, context: context)
        }
        routes.post("containers/:container/subscriptions/:environment/delete") { request, context, operatorContext in
            let deletion = try ConsoleSubscriptionDeletion(json: try await body(request, context, parts))
            try await service.deleteSubscription(
                container: container(context), environment: try environment(context), scope: try scope(named: deletion.database),
                userName: deletion.user, subscriptionID: deletion.subscriptionID, as: operatorContext)
            return Reply.json(Deleted(deleted: deletion.subscriptionID).json, context: context)
        }
        routes.get("containers/:container/users/:user") { request, context, operatorContext in
            let userName = context.parameter("user") ?? ""
            let detail = try await service.personDetail(container: container(context), userName: userName, as: operatorContext)
            var subscriptions: [PersonView.Subscriptions] = []
            for environment in [NimbusStorage.Environment.development, .production] {
                // The user as the caller once; then each of their databases.
                let caller = try await service.consoleTarget(
                    container: container(context), environment: environment, scope: .private, userName: userName, as: operatorContext,
                    changing: false, baseURL: nil
                ).caller
                for scope in [DatabaseScope.private, .shared, .public] {
                    let listed = try await service.listSubscriptions(DatabaseTarget(caller: caller, scope: scope))
                    guard !listed.subscriptions.isEmpty else { continue }
                    subscriptions.append(.init(environment: environment.rawValue, database: scope.rawValue, list: listed))
                }
            }
            var roles: [String: [String]] = [:]
            for (environment, names) in detail.roles { roles[environment.rawValue] = names }
            let person = PersonView(
                user: .init(
                    name: detail.user.name, createdAt: detail.user.createdAt, disabled: detail.user.isDisabled,
                    userRecordName: detail.member?.userRecordName),
                sessions: detail.sessions.map {
                    .init(session: $0.tokenHash, environment: $0.environment.rawValue, createdAt: $0.createdAt, lastUsedAt: $0.lastUsedAt)
                },
                pushTokens: detail.pushTokens.map {
                    .init(
                        environment: $0.owner.environment.rawValue, delivery: $0.isWebCourier ? "web courier" : "APNs \($0.apnsEnvironment)",
                        token: String($0.token.prefix(12)) + "…", deviceID: $0.deviceID, createdAt: $0.createdAt)
                },
                roles: roles, subscriptions: subscriptions)
            return Reply.json(person.json, context: context)
        }
        routes.post("containers/:container/users/:user/sessions/revoke") { request, context, operatorContext in
            let revocation = try SessionRevocation(json: try await body(request, context, parts))
            try await service.revokeSession(
                container: container(context), userName: context.parameter("user") ?? "", sessionID: revocation.session, as: operatorContext)
            return Reply.json(Revoked(.done).json, context: context)
        }
        routes.post("containers/:container/users/:user/roles/:environment", needs: .changeOfContainer) { request, context, operatorContext in
            let assignment = try RoleAssignment(json: try await body(request, context, parts))
            let userName = context.parameter("user") ?? ""
            let (role, assigned) = (assignment.role, assignment.assigned)
            try await service.assignRole(
                container: container(context), environment: try environment(context), userName: userName, role: role, assigned: assigned)
            try await service.audit(
                operatorContext.account.name, assigned ? "roles.assign" : "roles.unassign", container: container(context),
                "\(try environment(context).rawValue): role \(role) \(assigned ? "to" : "from") \(userName)")
            return Reply.json(RoleChanged(role: role, assigned: assigned).json, context: context)
        }
        routes.get("containers/:container/usage/:environment", needs: .sightOfContainer) { request, context, operatorContext in
            let environment = try environment(context)
            let publicUsage = try await service.publicUsage(container: container(context), environment: environment)
            var users: [UsageReport.Usage] = []
            for member in try await service.members(container: container(context), after: 0, limit: NimbusService.consolePageLimit, as: operatorContext) {
                let usage = try await service.usage(
                    of: DatabaseKey(container: container(context), environment: environment, scope: .private, ownerID: member.entry.member.userID))
                users.append(
                    .init(name: member.userName, usedBytes: usage.usedBytes, quotaBytes: usage.quotaBytes, historyBytes: usage.historyBytes))
            }
            let publicDatabase = UsageReport.Usage(
                name: nil, usedBytes: publicUsage.usedBytes, quotaBytes: publicUsage.quotaBytes, historyBytes: publicUsage.historyBytes)
            return Reply.json(UsageReport(publicDatabase: publicDatabase, users: users).json, context: context)
        }
    }

    // MARK: Request log and numbers

    static let exportLimit = 100_000

    /// The request log's entries a search of the query string finds, newest first: from the
    /// lasting store where the driver has one (this node's pending entries stored first), else
    /// from this node's memory.
    static func requests(
        matching request: Request, for account: OperatorRow, limit: Int, parts: ServerParts
    ) async throws -> [StoredRequest] {
        func parameter(_ name: String) -> String? { request.query(name).flatMap { $0.isEmpty ? nil : $0 } }
        var search = RequestSearch(limit: limit)
        search.visibleContainers = account.containers.map(Set.init)
        search.container = parameter("container")
        search.environment = parameter("environment")
        search.database = parameter("database")
        search.user = parameter("user")
        search.route = parameter("route")
        search.error = parameter("error")?.uppercased()
        search.since = parameter("since").flatMap(Int64.init)
        search.beforeID = parameter("before").flatMap(Int64.init)
        if let archive = parts.archive {
            await archive.flush()
            return try await archive.store.requests(search)
        }
        return parts.requests.newest(limit: limit) { entry in
            guard account.maySee(entryAbout: entry.container) else { return false }
            if let container = search.container, entry.container != container { return false }
            if let environment = search.environment, entry.environment != environment { return false }
            if let database = search.database, entry.database != database { return false }
            if let user = search.user, entry.user != user, entry.userName != user { return false }
            if let route = search.route, !entry.route.contains(route) { return false }
            if let error = search.error, entry.serverErrorCode != error, !entry.itemFailureCodes.contains(error) { return false }
            if let since = search.since, entry.at < since { return false }
            return true
        }.map { $0.stored(node: RequestLog.node) }
    }


    static func addLogRoutes(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        routes.get("requests") { request, context, operatorContext in
            let account = operatorContext.account
            let limit = min(max(request.query("limit").flatMap(Int.init) ?? 100, 1), 1_000)
            let rows = try await requests(matching: request, for: account, limit: limit, parts: parts)
            return Reply.json(RequestLogPage(requests: rows.map(\.logEntry)).json, context: context)
        }
        // The same search as JSON lines, newest first, up to `Self.exportLimit` entries.
        routes.get("requests/export") { request, context, operatorContext in
            let account = operatorContext.account
            let rows = try await requests(matching: request, for: account, limit: Self.exportLimit, parts: parts)
            var lines: [UInt8] = []
            for row in rows {
                lines += row.logEntry.line
            }
            var answer = Reply.bytes(lines, contentType: "application/x-ndjson; charset=utf-8", context: context)
            answer.headers[.contentDisposition] = "attachment; filename=\"nimbus-requests.jsonl\""
            return answer
        }
        routes.get("metrics") { request, context, operatorContext in
            let account = operatorContext.account
            let visible = { (container: String) in account.maySee(entryAbout: container.isEmpty ? nil : container) }
            let now = service.options.clock.nowMilliseconds()
            // Every node's, from the store, where the log lasts; else this node's, in memory.
            let minutes = try await parts.archive?.lastHour(now: now, visible: visible) ?? parts.requests.lastHour(now: now, visible: visible)
            let rows = minutes.map { minute in
                MetricsReport.Minute(
                    start: minute.start, requests: Int64(minute.figures.requests), p50: minute.figures.percentile(0.5),
                    p99: minute.figures.percentile(0.99), errors: minute.figures.errors.mapValues(Int64.init))
            }
            return Reply.json(MetricsReport(minutes: rows).json, context: context)
        }
    }
}
