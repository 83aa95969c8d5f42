import NimbusCore
import NimbusWire

/// The signed-in user, under `/database/1/{container}/{environment}/{database}/`.
///
/// | path | answer |
/// |---|---|
/// | `users/caller` | the caller's identity, at the top level and in `users` (clients read either; reference §10) |
/// | `users/current` | the caller's user record name and name |
enum UserRoutes {
    static let routes: [Route] = [
        .json("users/caller") { input in
            let user = try input.caller.requireUser(for: "users/caller")
            return CallerIdentityResponse(userRecordName: user.recordName, nickname: user.name)
        },
        .json("users/current") { input in
            let user = try input.caller.requireUser(for: "users/current")
            return CurrentUserResponse(userRecordName: user.recordName, firstName: user.name)
        },
    ]
}
