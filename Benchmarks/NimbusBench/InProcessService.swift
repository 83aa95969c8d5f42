import NimbusCore
import NimbusStorage
import NimbusWire

/// A `NimbusService` in this process on a given driver, with a container and an API token, for
/// benchmarks that measure the service without HTTP.
struct InProcessService {
    let service: NimbusService
    let container: String
    let apiToken: String

    init(storage: any StorageDriver, container: String) async throws {
        var options = NimbusService.Options()
        options.passwordRounds = 1_000
        service = try await NimbusService(storage: storage, options: options)
        self.container = container
        try await service.createContainer(id: container)
        apiToken = try await service.createAPIToken(container: container, environment: .development)
    }

    /// A new user, signed in, as a request from them sees itself.
    func caller(_ name: String) async throws -> Caller {
        _ = try await service.createUser(name: name, password: "password-\(name)")
        let (token, _) = try await service.signIn(
            container: container, environment: .development, apiToken: apiToken, userName: name, password: "password-\(name)")
        return try await service.authenticate(
            container: container, environment: .development, apiToken: apiToken, webAuthToken: token, deviceID: "bench-\(name)")
    }
}
