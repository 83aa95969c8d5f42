import NimbusCore
import NimbusWire

/// Sessions, under `/auth/1/{container}/{environment}/` (behind the API token alone).
///
/// | path | answer |
/// |---|---|
/// | `signin` | a JSON body `{username, password}` → `{ckWebAuthToken, userRecordName}`; a GET without a body → the sign-in page (`redirectURL` of `AUTHENTICATION_REQUIRED` leads here) |
/// | `signout` | ends the session named by `ckWebAuthToken` |
enum AuthRoutes {
    static let routes: [Route] = [
        Route("signin") { input in
            let caller = try input.caller
            if input.request.method == .get, input.request.headers[.contentLength].map({ $0 == "0" }) ?? true,
                input.request.headers[.transferEncoding] == nil
            {
                return Reply.bytes(
                    Array(SignInPage.html(container: caller.container, environment: caller.environment.rawValue).utf8),
                    contentType: "text/html; charset=utf-8", context: input.context)
            }
            let body = try SignInRequest(json: await input.body())
            let (token, userRecordName) = try await input.service.signIn(
                container: caller.container, environment: caller.environment, apiToken: input.query(WireKey.ckAPIToken),
                userName: body.username, password: body.password)
            input.context.exchange.update { $0.webAuthToken = token }
            return Reply.json(
                [WireKey.ckWebAuthToken: .string(token), WireKey.userRecordName: .string(userRecordName)], context: input.context)
        },
        .json("signout") { input in
            guard let token = input.query(WireKey.ckWebAuthToken), !token.isEmpty else {
                throw CloudKitError.badRequest("missing ckWebAuthToken: name the session to sign out")
            }
            try await input.service.signOut(webAuthToken: token)
            return [:]
        },
    ]

    /// Where `AUTHENTICATION_REQUIRED` sends a person: this server's sign-in page for the
    /// container and environment, with the API token the failed request used.
    static func signInURL(baseURL: String, container: String, environment: String, apiToken: String?) -> String {
        var url = "\(baseURL)/auth/1/\(percentEncoded(container))/\(environment)/signin"
        if let apiToken { url += "?ckAPIToken=\(percentEncoded(apiToken))" }
        return url
    }

    static func percentEncoded(_ text: String) -> String {
        var output = ""
        for byte in text.utf8 {
            let allowed =
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || Array("-._~".utf8).contains(byte)
            output += allowed ? String(UnicodeScalar(byte)) : "%" + String(byte, radix: 16, uppercase: true).leftPadded()
        }
        return output
    }
}

extension String {
    fileprivate func leftPadded() -> String { count == 1 ? "0" + self : self }
}
