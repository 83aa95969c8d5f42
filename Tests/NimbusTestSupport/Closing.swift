/// `body` with `resource`, closed by `close` afterwards whether `body` returned or threw; when
/// it threw, its error is the one that reaches the test, not a failure to close.
public func withClosing<Resource>(
    _ resource: Resource, closedBy close: (Resource) async throws -> Void, _ body: (Resource) async throws -> Void
) async throws {
    do {
        try await body(resource)
    } catch {
        try? await close(resource)
        throw error
    }
    try await close(resource)
}
