/// Liveness, at the root: `GET /health` answers `{"status":"ok"}` without credentials.
enum HealthRoutes {
    static let routes: [Route] = [
        .json("health") { _ in ["status": "ok"] }
    ]
}
