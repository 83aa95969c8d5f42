import Foundation
import HTTPTypes
import Hummingbird

/// The dashboard's files (docs/dashboard.md) at `/dashboard`: one page, its style and its
/// script, from the server's resources, with headers that keep the page to this server's own
/// code (no inline script, no framing, nothing from elsewhere).
enum DashboardRoutes {
    static let files: [String: String] = [
        "index.html": "text/html; charset=utf-8",
        "dashboard.css": "text/css; charset=utf-8",
        "dashboard.js": "text/javascript; charset=utf-8",
    ]

    static let policy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    /// The folder the build put the files in, beside the executable. Looked up rather than
    /// `Bundle.module`, which stops the process when the folder is missing (a binary copied
    /// alone): then the dashboard answers 404 saying so and the API runs on.
    static let folder: URL? = {
        let executable = URL(fileURLWithPath: CommandLine.arguments.first ?? "").resolvingSymlinksInPath().deletingLastPathComponent()
        let places = [executable, Bundle.main.bundleURL, Bundle.main.resourceURL].compactMap { $0 }
        for place in places {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: place.path)) ?? []
            if let bundle = entries.first(where: { $0.hasSuffix("_NimbusServer.resources") }) {
                let folder = place.appendingPathComponent(bundle).appendingPathComponent("Dashboard")
                if FileManager.default.fileExists(atPath: folder.appendingPathComponent("index.html").path) { return folder }
            }
        }
        return nil
    }()

    /// Browsers ask every site for one; an empty answer (and the page's own `data:` icon) keeps
    /// a 404 per visit out of the error figures.
    static let faviconPath = "/favicon.ico"

    static func add(to router: MethodRecordingRouter) {
        router.get(RouterPath(faviconPath)) { _, context in
            var response = Reply.empty(status: .noContent, context: context)
            response.headers[.cacheControl] = "max-age=86400"
            return response
        }
        router.get("dashboard") { _, context in serve("index.html", context) }
        router.get("dashboard/:file") { _, context in serve(context.parameter("file") ?? "", context) }
    }

    static func serve(_ name: String, _ context: NimbusRequestContext) -> Response {
        guard let type = files[name] else {
            return Reply.bytes(Array("no such dashboard file\n".utf8), contentType: "text/plain; charset=utf-8", status: .notFound, context: context)
        }
        guard let folder, let bytes = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) else {
            return Reply.bytes(
                Array("the dashboard's files are not installed beside the nimbus binary (copy the *_NimbusServer.resources folder next to it)\n".utf8),
                contentType: "text/plain; charset=utf-8", status: .notFound, context: context)
        }
        var response = Reply.bytes(Array(bytes), contentType: type, context: context)
        response.headers[HTTPField.Name("Content-Security-Policy")!] = policy
        response.headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        response.headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        response.headers[.cacheControl] = "no-cache"
        return response
    }
}
