import Foundation
import NimbusCore
import NimbusStorage
import NimbusWire

/// One request to APNs for one device: `POST /3/device/{token}` with these headers and body.
struct APNsPush: Sendable, Equatable {
    enum PushType: String, Sendable {
        /// Shows something (alert, sound or badge): priority 10, delivered at once.
        case alert
        /// Wakes the app to fetch (`content-available` only): priority 5, which APNs may
        /// delay and coalesce to save the device's power, as the seeds' silent pushes are.
        case background
    }

    var deviceToken: String
    /// `development` (the APNs sandbox) or `production`.
    var apnsEnvironment: String
    var pushType: PushType
    var collapseID: String?
    /// `apns-id`, so APNs's answer and a device's log name the same notification.
    var apnsID: String?
    var payload: [UInt8]

    var priority: Int { pushType == .alert ? 10 : 5 }

    /// APNs refuses larger payloads (413 `PayloadTooLarge`).
    static let payloadLimit = 4_096

    /// The push for a stored notification. A payload over APNs's limit loses the record
    /// fields it carries (`af`, the subscription's desired keys) first; if that is not enough,
    /// it becomes a bare "something changed" push, and the device reads the rest from the
    /// notification collection.
    init(_ notification: PushedNotification, to token: PushTokenRow) {
        self.init(
            deviceToken: token.token, apnsEnvironment: token.apnsEnvironment,
            pushType: notification.isSilent ? .background : .alert,
            collapseID: notification.collapseID.flatMap { $0.utf8.count <= 64 ? $0 : nil },
            apnsID: UUID(uuidString: notification.notificationID)?.uuidString,
            payload: Self.fitted(notification.payload))
    }

    init(
        deviceToken: String, apnsEnvironment: String, pushType: PushType, collapseID: String?, apnsID: String?,
        payload: [UInt8]
    ) {
        self.deviceToken = deviceToken
        self.apnsEnvironment = apnsEnvironment
        self.pushType = pushType
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }

    /// A badge change (`CKModifyBadgeOperation`): nothing but the new count.
    static func badge(_ value: Int64, to token: PushTokenRow) -> APNsPush {
        APNsPush(
            deviceToken: token.token, apnsEnvironment: token.apnsEnvironment, pushType: .alert, collapseID: nil,
            apnsID: nil, payload: JSON.object(["aps": ["badge": .int(value)]]).serialized())
    }

    static func fitted(_ payload: JSON) -> [UInt8] {
        let full = payload.serialized()
        guard full.count > payloadLimit, var root = payload.objectValue, var ck = root["ck"]?.objectValue else { return full }
        if var query = ck["qry"]?.objectValue {
            query["af"] = nil
            ck["qry"] = .object(query)
            root["ck"] = .object(ck)
            let withoutFields = JSON.object(root).serialized()
            if withoutFields.count <= payloadLimit { return withoutFields }
        }
        let bareCK = JSONObject(ck.pairs.filter { ["ce", "cid", "nid", "ckuserid"].contains($0.key) })
        return JSON.object(["aps": ["content-available": 1], "ck": .object(bareCK)]).serialized()
    }
}
