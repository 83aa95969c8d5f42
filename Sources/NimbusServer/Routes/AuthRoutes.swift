import Foundation
import Hummingbird
import NimbusCore
import NimbusWire

/// Sessions, under `/auth/1/{container}/{environment}/` (behind the API token alone).
///
/// | path | answer |
/// |---|---|
/// | `signin` | a JSON body `{username, password}` → `{ckWebAuthToken, userRecordName}`; a GET without a body → the sign-in page (`redirectURL` of `AUTHENTICATION_REQUIRED` leads here), which hands the session to the API token's sign-in callback or to the page that opened it |
/// | `signin/oidc` | `{idToken}` from an identity provider the container trusts → as `signin` |
/// | `signup` | `{username, password, emailAddress?, phoneNumber?, nameComponents?}` → as `signin`, where the container allows sign-up |
/// | `signout` | ends the session named by `ckWebAuthToken` |
enum AuthRoutes {
    static let routes: [Route] = [
        // GET shows the page and POST signs in: a GET never makes a session.
        Route("signin", .reads) { input in
            let caller = try input.caller
            if input.request.method == .get {
                guard input.request.headers[.contentLength].map({ $0 == "0" }) ?? true, input.request.headers[.transferEncoding] == nil else {
                    throw CloudKitError.badRequest("signing in takes POST (a GET never changes anything); a GET without a body shows the sign-in page")
                }
                // Authenticated by it just now, so a cached read.
                let token = try await input.service.apiTokenRow(input.query(WireKey.ckAPIToken) ?? "")
                let page = SignInPage.html(
                    container: caller.container, environment: caller.environment.rawValue, callback: token?.signInCallback,
                    openerOrigins: token?.allowedOrigins ?? [])
                return Reply.bytes(Array(page.utf8), contentType: "text/html; charset=utf-8", context: input.context)
            }
            let body = try SignInRequest(json: await input.body())
            return try await session(input) { service, caller, apiToken, address in
                try await service.signIn(
                    container: caller.container, environment: caller.environment, apiToken: apiToken, userName: body.username,
                    password: body.password, clientAddress: address, sessionToken: input.query(WireKey.ckWebAuthToken))
            }
        },
        Route("signin/oidc") { input in
            let body = try IDTokenSignInRequest(json: await input.body())
            return try await session(input) { service, caller, apiToken, address in
                try await service.signIn(
                    container: caller.container, environment: caller.environment, apiToken: apiToken, idToken: body.idToken,
                    clientAddress: address)
            }
        },
        Route("signup") { input in
            let body = try SignUpRequest(json: await input.body())
            return try await session(input) { service, caller, apiToken, address in
                try await service.signUp(
                    container: caller.container, environment: caller.environment, apiToken: apiToken, body, clientAddress: address)
            }
        },
        .rawJSON("signout") { input in
            guard let token = input.query(WireKey.ckWebAuthToken), !token.isEmpty else {
                throw CloudKitError.badRequest("missing ckWebAuthToken: name the session to sign out")
            }
            try await input.service.signOut(webAuthToken: token)
            return [:]
        },
    ]

    /// A session started by `start` (a password, an id token, a sign-up), answered as
    /// `signin` answers: the token in the body and echoed in the header.
    static func session(
        _ input: RouteInput,
        _ start: (NimbusService, Caller, String?, String?) async throws -> (webAuthToken: String, userRecordName: String)
    ) async throws -> Response {
        let (token, userRecordName) = try await start(
            input.service, try input.caller, input.query(WireKey.ckAPIToken), input.context.clientAddress)
        input.context.exchange.update { $0.webAuthToken = token }
        return Reply.json(SignInResponse(ckWebAuthToken: token, userRecordName: userRecordName).json, context: input.context)
    }

    /// Where `AUTHENTICATION_REQUIRED` sends a person: this server's sign-in page for the
    /// container and environment, with the API token the failed request used.
    static func signInURL(baseURL: String, container: String, environment: String, apiToken: String?) -> String {
        var url = "\(baseURL)/auth/1/\(percentEncoded(container))/\(environment)/signin"
        if let apiToken { url += "?\(WireKey.ckAPIToken)=\(percentEncoded(apiToken))" }
        return url
    }

    /// RFC 3986's unreserved characters: everything else in a path segment or query value is
    /// percent-encoded.
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    static func percentEncoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text
    }
}
