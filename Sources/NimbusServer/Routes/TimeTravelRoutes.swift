import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// Time travel in the admin API (docs/operations.md, "Time travel"):
///
/// `POST containers/{c}/time-travel/{env}` with `{"to": "2026-11-25T10:00:00Z", "user": "alice",
/// "zone": "Notes", "apply": false}`: what going back would change in the user's zone (every
/// zone of their private database without `zone`; the public database without `user`), and
/// with `"apply": true` the change itself. A preview is for an operator who may see the
/// container, the restore for one who may change it; both are on the record, since both read
/// the user's data.
enum TimeTravelRoutes {
    static func add(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        routes.post("containers/:container/time-travel/:environment") { request, context, operatorContext in
            let container = ConsoleRoutes.container(context)
            let environment = try ConsoleRoutes.environment(context)
            let input = try await ConsoleRoutes.body(request, context, parts)
            let apply = try input.bool("apply") ?? false
            if apply { try operatorContext.requireChange(container: container) } else { try operatorContext.requireSight(of: container) }
            let user = try input.string("user").flatMap { $0.isEmpty ? nil : $0 }
            let zone = try input.string("zone").flatMap { $0.isEmpty ? nil : $0 }
            let moment = try NimbusService.parseMoment(try input.requiredString("to"))
            let travel = try await service.timeTravel(
                container: container, environment: environment, userName: user, zoneName: zone, to: moment, apply: apply,
                operatorName: operatorContext.account.name)
            let changed = travel.zones.reduce(0) { $0 + $1.items.count }
            try await service.audit(
                operatorContext.account.name, apply ? "data.restore" : "data.restore-preview", container: container,
                "\(environment.rawValue) \(user.map { "private database of \($0)" } ?? "public database"), \(zone.map { "zone \($0)" } ?? "every zone") to \(NimbusService.isoMoment(moment)): \(changed) record(s)\(apply ? " restored" : " would change")"
            )
            return Reply.json(describe(travel), context: context)
        }
    }

    static func describe(_ travel: TimeTravel) -> JSON {
        [
            "to": .string(NimbusService.isoMoment(travel.moment)), "toMilliseconds": .int(travel.moment),
            "oldestAvailable": .string(NimbusService.isoMoment(travel.oldestMoment)), "applied": .bool(travel.applied),
            "zones": .array(
                travel.zones.map { zone in
                    [
                        "zone": .string(zone.zoneName),
                        "changes": .array(
                            zone.items.map {
                                [
                                    WireKey.recordName: .string($0.recordName), WireKey.recordType: .string($0.recordType),
                                    "change": .string($0.change.rawValue),
                                ]
                            }),
                        "skipped": .array(zone.skipped.map { [WireKey.recordName: .string($0.recordName), "reason": .string($0.reason)] }),
                    ]
                }),
        ]
    }
}
