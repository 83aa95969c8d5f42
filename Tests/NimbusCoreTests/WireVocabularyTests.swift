import Foundation
import NimbusWire
import Testing

/// The server and NimbusKit speak one vocabulary: a JSON key both sides use is spelled once,
/// in `WireKey` (or a NimbusWire type), never as a string literal on each side.
@Suite struct WireVocabularyTests {
    /// Literals both sides may write that are not wire keys.
    static let notWireKeys: Set<String> = [
        "https",  // a URL scheme
        "_",  // the prefix of user record names
        "s", "m", "h", "d",  // units of a length of time on a command line (IntervalText)
    ]

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Identifier-shaped string literals (`"recordName"`) in the Swift files under `folders`,
    /// outside comments and multi-line strings, with where each is written.
    static func literals(in folders: [String]) throws -> [String: [String]] {
        var found: [String: [String]] = [:]
        // A quote not preceded by a backslash or word character (Swift's Regex has no lookbehind).
        let pattern = try Regex(#"(?:^|[^\\\w])"([A-Za-z_][A-Za-z0-9_]*)""#)
        for folder in folders {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else { continue }
            for case let file as URL in files where file.pathExtension == "swift" {
                var inMultilineString = false
                let text = try String(contentsOf: file, encoding: .utf8)
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let trimmed = line.trimmingCharacters(in: .whitespaces)
                    if trimmed.hasPrefix("//") { continue }
                    let quotes = line.components(separatedBy: "\"\"\"").count - 1
                    if inMultilineString || quotes == 1 {
                        if quotes == 1 { inMultilineString.toggle() }
                        continue
                    }
                    for match in String(line).matches(of: pattern) {
                        let literal = String(match.output[1].substring ?? "")
                        found[literal, default: []].append("\(file.lastPathComponent):\(number + 1)")
                    }
                }
            }
        }
        return found
    }

    @Test func noWireKeyIsSpelledOnBothSides() throws {
        let kit = try Self.literals(in: ["Sources/NimbusKit"])
        let server = try Self.literals(in: ["Sources/NimbusCore", "Sources/NimbusServer"])
        #expect(!kit.isEmpty && !server.isEmpty, "the scan found no sources under \(Self.root.path)")
        let shared = Set(kit.keys).intersection(server.keys).subtracting(Self.notWireKeys)
        for key in shared.sorted() {
            Issue.record(
                "\"\(key)\" is written in NimbusKit (\(kit[key]!.prefix(3).joined(separator: ", "))) and in the server (\(server[key]!.prefix(3).joined(separator: ", "))); name it once in NimbusWire's WireKey")
        }
    }

    @Test func theScanSeesLiteralsItMustCatch() throws {
        // A negative control: the scan finds literals the server spells itself (an index grant's name).
        let server = try Self.literals(in: ["Sources/NimbusCore"])
        #expect(server["SORTABLE"] != nil)
    }

    @Test func errorDictionariesRoundTrip() throws {
        var error = CloudKitError(
            .conflict, "the record changed", recordName: "r1", zoneID: ["zoneName": "Z"], serverRecord: ["recordName": "r1"],
            limitName: nil)
        error.retryAfter = 7
        error.redirectURL = "https://example.com/signin"
        error.subscriptionID = "s"
        let json = error.json(uuid: "U")
        let decoded = try #require(CloudKitError(json: try JSON.parse(json.serialized())))
        #expect(decoded == error)
        // A code from a newer server keeps its name, so the SDK can still report it.
        let unknown = try #require(CloudKitError(json: ["serverErrorCode": "NO_SUCH_CODE", "reason": "x"]))
        #expect(unknown.code.rawValue == "NO_SUCH_CODE" && !unknown.code.isRecognized && unknown.reason == "x")
        #expect(CloudKitError(json: ["reason": "no code"]) == nil)
    }

    @Test func comparatorNegationsAreInvolutions() {
        for comparator in QueryComparator.allCases {
            guard let negation = comparator.negation else { continue }
            #expect(negation.negation == comparator, "\(comparator)")
            #expect(negation != comparator)
        }
        #expect(QueryComparator.near.negation == nil)
    }

    @Test func systemFieldsReadByEitherName() {
        for field in SystemField.allCases {
            #expect(SystemField(wireName: field.wireName) == field)
            #expect(SystemField(wireName: field.rawValue) == field)
        }
        #expect(SystemField(wireName: "recordType") == nil)
    }
}
