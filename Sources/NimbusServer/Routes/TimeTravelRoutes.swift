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
            let travelRequest = try TimeTravelRequest(json: try await ConsoleRoutes.body(request, context, parts))
            let (apply, user, zone) = (travelRequest.apply, travelRequest.user, travelRequest.zone)
            if apply { try operatorContext.requireChange(container: container) } else { try operatorContext.requireSight(of: container) }
            let moment = try NimbusService.parseMoment(travelRequest.to)
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
        TimeTravelReport(
            to: NimbusService.isoMoment(travel.moment), toMilliseconds: travel.moment,
            oldestAvailable: NimbusService.isoMoment(travel.oldestMoment), applied: travel.applied,
            zones: travel.zones.map { zone in
                .init(
                    zone: zone.zoneName,
                    changes: zone.items.map { .init(recordName: $0.recordName, recordType: $0.recordType, change: $0.change.rawValue) },
                    skipped: zone.skipped.map { .init(recordName: $0.recordName, reason: $0.reason) })
            }
        ).json
    }
}
