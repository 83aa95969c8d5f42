import Hummingbird
import NimbusCore
import NimbusWire

/// The page at a share's URL, `GET /share/{shortGUID}` (docs/sharing.md): no credentials, the
/// GUID leads to its container; the page signs the person in and shows and accepts the share
/// through the protocol's own endpoints (`records/resolve`, `records/accept`).
enum ShareRoutes {
    static func addPage(to router: MethodRecordingRouter, parts: ServerParts) {
        router.get("share/:shortGUID") { request, context in
            let guid = context.parameter("shortGUID") ?? ""
            guard let page = try await parts.service.sharePage(shortGUID: guid) else {
                return Reply.bytes(
                    Array(SharePage.missing.utf8), contentType: "text/html; charset=utf-8", status: .notFound, context: context)
            }
            let html = SharePage.html(
                shortGUID: guid, container: page.container, environment: page.environment.rawValue, apiToken: page.apiToken,
                baseURL: context.exchange.baseURL(for: request))
            return Reply.bytes(Array(html.utf8), contentType: "text/html; charset=utf-8", context: context)
        }
    }
}
