import NIOCore
import NimbusWire

/// CloudKit JS's web-courier long poll, at the root.
///
/// | path | answer |
/// |---|---|
/// | `webcourier/aps?tok=…` | one push payload as JSON, or 204 after the poll timeout with nothing to send |
///
/// The token is the credential: the URL `tokens/create` hands out is all a client has.
enum CourierRoutes {
    static let routes: [Route] = [
        Route("webcourier/aps", .reads) { input in
            guard let token = input.query("tok"), !token.isEmpty else {
                throw CloudKitError.badRequest("missing tok: poll the webcourierURL that tokens/create returned")
            }
            let row = try await input.service.webCourierToken(token)
            guard let payload = await input.parts.courier.poll(token: row) else {
                return Reply.empty(status: .noContent, context: input.context)
            }
            return Reply.bytes(payload, contentType: Reply.jsonContentType, context: input.context)
        }
    ]
}
