import Foundation
import NimbusTesting

/// How long `NimbusTestServer` (issue 41, docs/testing.md) takes to start, to answer a test's
/// first signed-in request, and to stop, over `samples` rounds in this process: what a test pays
/// for a server of its own. Benchmarks/testing-startup.sh runs it beside the alternative, a
/// `nimbus serve` process started until it answers `/health`.
struct TestingStartupBenchmark {
    let options: Options

    func run() async throws {
        var starts: [Double] = []
        var firstRequests: [Double] = []
        var stops: [Double] = []
        let clock = ContinuousClock()
        for _ in 0..<max(options.samples, 1) {
            let began = clock.now
            let server = try await NimbusTestServer.start()
            let started = clock.now
            let phone = try await server.device(of: "alice")
            _ = try await phone.privateCloudDatabase.save(CKRecordZone(zoneName: "Notes"))
            let answered = clock.now
            await server.stop()
            let stopped = clock.now
            starts.append(Self.milliseconds(started - began))
            firstRequests.append(Self.milliseconds(answered - started))
            stops.append(Self.milliseconds(stopped - answered))
        }
        let wholes = zip(zip(starts, firstRequests), stops).map { $0.0 + $0.1 + $1 }
        print("| in-process test server, \(starts.count) rounds | median ms | p90 ms |")
        print("|---|---|---|")
        for (name, values) in [
            ("start", starts), ("first signed-in request (sign-in, zone save)", firstRequests), ("stop", stops),
            ("start + first request + stop", wholes),
        ] {
            print("| \(name) | \(Self.format(Self.quantile(values, 0.5))) | \(Self.format(Self.quantile(values, 0.9))) |")
        }
    }

    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    static func quantile(_ values: [Double], _ q: Double) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * q).rounded()))]
    }

    static func format(_ value: Double) -> String { String(format: "%.1f", value) }
}
