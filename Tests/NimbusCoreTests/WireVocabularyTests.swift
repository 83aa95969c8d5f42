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

    /// The lines of code in the Swift files under `folders`, outside comments and multi-line
    /// strings, each with where it is written.
    static func codeLines(in folders: [String]) throws -> [(line: String, place: String)] {
        var lines: [(line: String, place: String)] = []
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
                    lines.append((String(line), "\(file.lastPathComponent):\(number + 1)"))
                }
            }
        }
        return lines
    }

    /// Identifier-shaped string literals (`"recordName"`) in the code under `folders`, with
    /// where each is written.
    static func literals(in folders: [String]) throws -> [String: [String]] {
        // A quote not preceded by a backslash or word character (Swift's Regex has no lookbehind).
        let pattern = try Regex(#"(?:^|[^\\\w])"([A-Za-z_][A-Za-z0-9_]*)""#)
        var found: [String: [String]] = [:]
        for (line, place) in try codeLines(in: folders) {
            for match in line.matches(of: pattern) {
                found[String(match.output[1].substring ?? ""), default: []].append(place)
            }
        }
        return found
    }

    /// The string literals in the code under `folders` used as JSON keys: a subscript
    /// (`json["missing"]`) or a dictionary literal's key (`["text": …]`), with where each is.
    static func jsonKeys(in folders: [String]) throws -> [String: [String]] {
        let pattern = try Regex(#"\["([A-Za-z_][A-Za-z0-9_]*)"\]|"([A-Za-z_][A-Za-z0-9_]*)":"#)
        var found: [String: [String]] = [:]
        for (line, place) in try codeLines(in: folders) {
            for match in line.matches(of: pattern) {
                guard let key = match.output[1].substring ?? match.output[2].substring else { continue }
                found[String(key), default: []].append(place)
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

    /// The admin API has one vocabulary too: a JSON key the `nimbus` command line reads or
    /// writes that the server also spells comes from NimbusWire (`ConsoleKey` or a body type).
    /// Environment variables are looked up by subscript as well, and the server reads none.
    @Test func noAdminKeyIsSpelledByTheCommandLineAndTheServer() throws {
        let commandLine = try Self.jsonKeys(in: ["Sources/NimbusCLI"])
        let server = try Self.literals(in: ["Sources/NimbusCore", "Sources/NimbusServer"])
        #expect(!commandLine.isEmpty, "the scan found no JSON keys under Sources/NimbusCLI")
        for key in Set(commandLine.keys).intersection(server.keys).sorted() {
            Issue.record(
                "\"\(key)\" is a JSON key in the command line (\(commandLine[key]!.prefix(3).joined(separator: ", "))) and spelled in the server (\(server[key]!.prefix(3).joined(separator: ", "))); name it once in NimbusWire's ConsoleKey")
        }
    }

    @Test func theScanSeesLiteralsItMustCatch() throws {
        // A negative control: the scan finds literals the server spells itself (an index grant's name).
        let server = try Self.literals(in: ["Sources/NimbusCore"])
        #expect(server["SORTABLE"] != nil)
        // And the command line's JSON keys: the environment variables it reads by subscript.
        #expect(try Self.jsonKeys(in: ["Sources/NimbusCLI"])["NIMBUS_OPERATOR_PASSWORD"] != nil)
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
