/// Liveness, at the root: `GET /health` answers `{"status":"ok"}` without credentials.
enum HealthRoutes {
    static let routes: [Route] = [
        .rawJSON("health") { _ in ["status": "ok"] }
    ]
}
