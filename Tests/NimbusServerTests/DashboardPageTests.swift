import Foundation
import NimbusCore
import NimbusTestSupport
import NimbusWire
import Testing

/// The dashboard page (issue 21, docs/dashboard.md) in a real headless Chromium
/// (`Tests/Scripts/dashboard_flow.py`, selenium): sign-in with a wrong then the right password,
/// operators, a hostile name that stays text, a read-only operator made and signed in, the
/// audit log, sign-out, a phone's width. `NIMBUS_DASHBOARD_SCREENSHOTS=folder` keeps the
/// screenshots (docs/dashboard/ holds the committed ones).
@Suite struct DashboardPageTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/dashboard_flow.py").path

    @Test func theDashboardWorksInChromium() async throws {
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            let screenshots = ProcessInfo.processInfo.environment["NIMBUS_DASHBOARD_SCREENSHOTS"]
            let config: JSON = [
                "url": .string(server.baseURL), "name": "olga", "password": .string(password),
                "screenshots": screenshots.map(JSON.string) ?? .null,
            ]
            let configFile = NSTemporaryDirectory() + "nimbus-dashboard-" + UUID().uuidString + ".json"
            try Data(config.serialized()).write(to: URL(fileURLWithPath: configFile))
            defer { try? FileManager.default.removeItem(atPath: configFile) }
            let (status, printed) = try await ExternalProcess.run(["python3", Self.script, configFile])
            #expect(status == 0, "dashboard_flow.py failed")
            let result = try JSON.parse(printed)
            #expect(result["wrongPassword"]?.stringValue?.contains("wrong password") == true, "\(result)")
            #expect(result["signedInAs"]?.stringValue == "olga")
            #expect(result["hostileMessage"]?.stringValue?.contains("<img src=x") == true, "\(result)")
            #expect(result["pwned"] == .null, "a name ran as markup: \(result)")
            let operators = result["operatorsAfter"]?.arrayValue?.compactMap { $0.arrayValue?.first?.stringValue } ?? []
            #expect(operators == ["olga", "rita"], "\(result)")
            let rita = try #require(try await server.service.operators().first { $0.name == "rita" })
            #expect(rita.role == .readOnly)
            #expect(result["containers"]?.arrayValue?.contains("iCloud.com.example.notes") == true, "\(result)")
            // The token the page showed works, for the container and origin it was made for.
            let apiToken = try #require(result["apiToken"]?.stringValue)
            let row = try await server.service.apiTokenRow(apiToken)
            #expect(row?.container == "iCloud.com.example.notes" && row?.allowedOrigins == ["https://notes.example.com"])
            let audit = (result["audit"]?.arrayValue ?? []).compactMap { $0.arrayValue?.compactMap(\.stringValue) }
            #expect(audit.map { $0[2] } == ["tokens.create", "containers.create", "operators.create", "operators.create"], "\(result)")
            #expect(audit[2][4].contains("rita"))
            #expect(!audit.contains { $0[4].contains(apiToken) })
            #expect(result["afterSignOut"]?.stringValue == "Signed out.")
            #expect(result["readOnlyCreateVisible"]?.boolValue == false, "\(result)")
            #expect(result["phoneOverflow"]?.boolValue == false, "\(result)")
        }
    }

    @Test func theFilesCarryAPolicyAndNothingElseIsServed() async throws {
        try await TestServer.with { server in
            let client = server.client()
            for (path, type) in [("/dashboard", "text/html"), ("/dashboard/dashboard.js", "text/javascript"), ("/dashboard/dashboard.css", "text/css")] {
                let answer = try await client.send(path: path, body: nil, rawQuery: "")
                #expect(answer.status == 200 && answer.header("Content-Type")?.hasPrefix(type) == true, "\(path): \(answer.status)")
                #expect(answer.header("Content-Security-Policy")?.contains("script-src 'self'") == true)
                #expect(answer.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
            }
            for path in ["/dashboard/../Package.swift", "/dashboard/other.js", "/dashboard/%2e%2e%2fPackage.swift"] {
                let answer = try await client.send(path: path, body: nil, rawQuery: "")
                #expect(answer.status == 404, "\(path): \(answer.status)")
            }
            // Nothing the page needs comes from elsewhere.
            let page = try await client.send(path: "/dashboard", body: nil, rawQuery: "").text
            #expect(!page.contains("src=\"http") && !page.contains("href=\"http") && !page.contains("//cdn"))
        }
    }
}
