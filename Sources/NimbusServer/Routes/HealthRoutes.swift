/// Liveness, at the root: `GET /health` answers `{"status":"ok"}` without credentials.
enum HealthRoutes {
    /// Its path, as the access log sees it (probes are kept out of the request log).
    static let path = "/health"
    static let routes: [Route] = [
        .rawJSON("health", .reads) { _ in ["status": "ok"] }
    ]
}
