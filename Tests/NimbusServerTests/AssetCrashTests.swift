import Crypto
import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// `kill -9` during uploads (issue 18): every upload the server answered is a whole blob that
/// a record can still take after the restart, and no blob file anywhere is half-written (a
/// blob file's name begins with its bytes' SHA-256, so each one can be checked).
@Suite struct AssetCrashTests {
    @Test func uploadsSurviveKillNineWholeAndNoBlobIsHalfWritten() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let (first, client) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)

        // Eight uploaders of distinct 256 KiB files until the server dies, and one upload held
        // open halfway, so its bytes are in staging at the kill.
        let half = try #require(try await AssetTests.uploadURLs(client, [("Photo", "image")]).first)
        let held = try RawConnection(port: first.port)
        try held.send("POST \(half.dropFirst(first.baseURL.count)) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 262144\r\n\r\n")
        try held.send(Array(repeating: 7, count: 131_072))
        let answered = LockedList<(receipt: JSON, bytes: [UInt8])>()
        await withTaskGroup(of: Void.self) { group in
            for uploader in 0..<8 {
                group.addTask {
                    var number = 0
                    while true {
                        number += 1
                        var bytes = [UInt8](repeating: UInt8(uploader), count: 262_144)
                        withUnsafeBytes(of: number.bigEndian) { bytes.replaceSubrange(0..<8, with: $0) }
                        guard let url = try? await AssetTests.uploadURLs(client, [("Photo", "image")]).first,
                            let answer = try? await AssetTests.http(.POST, url, body: bytes)
                        else { return }  // the server is gone
                        if answer.status == 200, let file = answer.json["singleFile"] { answered.append((file, bytes)) }
                    }
                }
            }
            group.addTask {
                let latest = Date().addingTimeInterval(20)
                while Date() < latest, Date() < latest.addingTimeInterval(-18.5) || answered.count < 10 {
                    try? await Task.sleep(for: .milliseconds(20))
                }
                first.kill()
            }
        }
        #expect(answered.count >= 10, "too few uploads before the kill to tell anything")

        // No blob file is half-written: each holds exactly the bytes its name promises.
        let blobs = dataDirectory + "/assets/blobs"
        let files = (FileManager.default.enumerator(atPath: blobs)?.allObjects as? [String] ?? []).filter { $0.contains("-") }
        #expect(files.count >= answered.count)
        for file in files {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: blobs + "/" + file))
            let hex = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
            #expect((file as NSString).lastPathComponent.hasPrefix(hex), "blob \(file) does not hold the bytes its name promises")
        }

        // After the restart every answered upload binds to a record and downloads whole.
        let second = try await NimbusProcess.serve(dataDirectory: dataDirectory)
        defer { second.stop() }
        let reader = APIClient(
            baseURL: second.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: client.webAuthToken, userRecordName: nil)
        let uploads = answered.values
        for start in stride(from: 0, to: uploads.count, by: 100) {
            let chunk = Array(uploads[start..<min(start + 100, uploads.count)])
            let saved = try await reader.modify(chunk.enumerated().map { AssetTests.photo("r\(start + $0.offset)", $0.element.receipt) })
            #expect(saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text.prefix(500))")
        }
        for (index, upload) in uploads.enumerated().prefix(20) {
            let record = try await reader.lookup(["r\(index)"]).records.first
            let url = try #require(record?.fieldValue("image")?["downloadURL"]?.stringValue)
            try await expectEqual(AssetTests.http(.GET, url).body, upload.bytes)
        }
    }
}

/// A list several tasks append to.
final class LockedList<Element: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var elements: [Element] = []
    var values: [Element] { lock.withLock { elements } }
    var count: Int { lock.withLock { elements.count } }
    func append(_ element: Element) { lock.withLock { elements.append(element) } }
}
