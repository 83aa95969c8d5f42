import NimbusCore
import NimbusWire

/// The switches of a server in test mode (`nimbus serve --test-mode`, docs/testing.md): the
/// clock, faults, and signing a user out, for the tests of any client (NimbusKit's own go
/// through `NimbusTesting`). Answered only in test mode; no credentials, so never turn test mode
/// on for a server anyone else can reach.
enum TestModeRoutes {
    static let routes: [Route] = [
        .rawJSON("test/1/state", .reads) { input in try state(testMode(input)) },
        .rawJSON("test/1/clock/advance") { input in
            let faults = try testMode(input)
            let body = try await input.body()
            guard let seconds = try body.int("seconds"), (1...maximumSeconds).contains(seconds) else {
                throw CloudKitError.badRequest("seconds: the whole seconds to move the clock ahead, 1 to \(maximumSeconds)")
            }
            faults.clock.advance(milliseconds: seconds * 1000)
            return state(faults)
        },
        .rawJSON("test/1/faults") { input in
            let faults = try testMode(input)
            let fault = try await Self.fault(try await input.body(), service: input.service)
            faults.add(fault)
            return ["fault": json(fault)]
        },
        .rawJSON("test/1/faults/clear") { input in
            let faults = try testMode(input)
            let id = try await input.body().string("id")
            let removed = faults.remove(id: id)
            if let id, removed == 0 { throw CloudKitError(.notFound, "no fault has id '\(Names.escaped(id))' (it may have been spent)") }
            return ["removed": .int(Int64(removed))]
        },
        .rawJSON("test/1/users/signOut") { input in
            _ = try testMode(input)
            let user = try await input.body().requiredString("user")
            return ["sessionsEnded": .int(Int64(try await input.service.revokeSessions(userName: user)))]
        },
    ]

    /// A day and more: the longest jump a test makes (retention, expiry) in one call.
    static let maximumSeconds: Int64 = 366 * 86_400

    private static func testMode(_ input: RouteInput) throws -> FaultSwitchboard {
        guard let faults = input.service.options.faults else {
            throw CloudKitError(.notFound, "this server is not in test mode; start it with `nimbus serve --test-mode` (never in production)")
        }
        return faults
    }

    private static func state(_ faults: FaultSwitchboard) -> JSON {
        [
            "clock": ["now": .int(faults.clock.nowMilliseconds()), "advancedMilliseconds": .int(faults.clock.advancedMilliseconds)],
            "faults": .array(faults.all.map(json)),
        ]
    }

    /// A fault from its JSON: `kind`, the scope (`container`, `user`, `route`, `zone`,
    /// `recordName`), `count` (default 1; `"always": true` until cleared), `retryAfter`,
    /// `delaySeconds`.
    private static func fault(_ body: ObjectReader, service: NimbusService) async throws -> Fault {
        let kinds = Fault.Kind.allCases.map(\.rawValue).joined(separator: ", ")
        let name = try body.requiredString(WireKey.kind)
        guard let kind = Fault.Kind(rawValue: name) else {
            throw CloudKitError.badRequest("\(WireKey.kind): '\(Names.escaped(name))' is not a fault; one of \(kinds)")
        }
        func bounded(_ key: String, _ range: ClosedRange<Int64>, default value: Int64) throws -> Int {
            guard let given = try body.int(key) else { return Int(value) }
            guard range.contains(given) else { throw CloudKitError.badRequest("\(key): \(given) is outside \(range.lowerBound)...\(range.upperBound)") }
            return Int(given)
        }
        let always = try body.bool("always") ?? false
        if always, body.value("count") != nil { throw CloudKitError.badRequest("count and always: give one, not both") }
        let fault = Fault(
            kind, retryAfter: try bounded("retryAfter", 1...3600, default: 1), delaySeconds: try bounded("delaySeconds", 1...3600, default: 2),
            container: try body.string("container"), user: try body.string("user"), route: try body.string("route"),
            zone: try body.string("zone"), recordName: try body.string(WireKey.recordName),
            count: always ? nil : try bounded("count", 1...1_000_000, default: 1))
        if kind == .conflict, fault.recordName == nil {
            throw CloudKitError.badRequest("recordName: a conflict fault names the record whose next save conflicts")
        }
        return try await service.resolvingUser(of: fault)
    }

    private static func json(_ fault: Fault) -> JSON {
        var object: JSONObject = ["id": .string(fault.id), WireKey.kind: .string(fault.kind.rawValue)]
        switch fault.kind {
        case .throttled, .zoneBusy, .tryAgainLater: object["retryAfter"] = .int(Int64(fault.retryAfter))
        case .pushDelayed: object["delaySeconds"] = .int(Int64(fault.delaySeconds))
        default: break
        }
        for (key, value) in [
            ("container", fault.container), ("user", fault.user), ("route", fault.route), ("zone", fault.zone),
            (WireKey.recordName, fault.recordName),
        ] {
            if let value { object[key] = .string(value) }
        }
        object["remaining"] = fault.remaining.map { .int(Int64($0)) } ?? .string("always")
        return .object(object)
    }
}
