import Foundation
import Testing

/// The admin API has one vocabulary, NimbusWire's (`ConsoleKey`, `WireKey` and the body types in
/// `Sources/NimbusWire/Console`): the server's routes spell no JSON key of their own, and every
/// property the dashboard's script reads is a key of that vocabulary, one of the script's own
/// names, or JavaScript's and the browser's. A key renamed on the server, or misspelled in the
/// script, fails here rather than as an empty cell in a browser.
@Suite struct ConsoleVocabularyTests {
    static let root = WireVocabularyTests.root

    // MARK: The server's routes

    /// Route files that still spell keys, and why.
    static let routesWithKeysOfTheirOwn: [String: String] = [
        "TestModeRoutes.swift": "test mode's fault bodies (read by NimbusTesting, not by the dashboard or the command line)",
        "HealthRoutes.swift": "`{\"status\": \"ok\"}`, which load balancers read",
    ]

    /// JSON keys spelled as literals in the code under `folders`: a subscript or a dictionary
    /// literal's key (as `WireVocabularyTests.jsonKeys` finds them), and a body read by name
    /// (`body.requiredString("name")`), with where each is.
    static func spelledKeys(in folders: [String]) throws -> [String: [String]] {
        var found = try WireVocabularyTests.jsonKeys(in: folders)
        let read = try Regex(
            #"\.(?:requiredString|string|bool|int|double|stringArray|object|requiredObject|array|requiredArray)\("([A-Za-z_][A-Za-z0-9_]*)""#)
        for (line, place) in try WireVocabularyTests.codeLines(in: folders) {
            for match in line.matches(of: read) {
                found[String(match.output[1].substring ?? ""), default: []].append(place)
            }
        }
        return found
    }

    @Test func theRoutesSpellNoJSONKeyOfTheirOwn() throws {
        let spelled = try Self.spelledKeys(in: ["Sources/NimbusServer/Routes"])
        for (key, places) in spelled.sorted(by: { $0.key < $1.key }) {
            let unexcused = places.filter { place in !Self.routesWithKeysOfTheirOwn.keys.contains { place.hasPrefix($0 + ":") } }
            if !unexcused.isEmpty {
                Issue.record(
                    "\"\(key)\" is spelled in a route (\(unexcused.prefix(3).joined(separator: ", "))); name it in NimbusWire (ConsoleKey or WireKey) and answer with a body type")
            }
        }
    }

    @Test func theRouteScanFindsWhatItMustCatch() throws {
        // A negative control: test mode's routes still spell keys, and the scan sees them.
        let spelled = try Self.spelledKeys(in: ["Sources/NimbusServer/Routes"])
        #expect(spelled["always"]?.contains { $0.hasPrefix("TestModeRoutes.swift:") } == true)
        #expect(spelled["seconds"] != nil, "a body read by name (body.int(\"seconds\")) is found")
    }

    // MARK: The dashboard's script

    /// Every key NimbusWire names (`static let name = "key"`): the CloudKit protocol's and the
    /// admin API's.
    static func vocabulary() throws -> Set<String> {
        let pattern = try Regex(#"static let [A-Za-z_][A-Za-z0-9_]* = "([A-Za-z_][A-Za-z0-9_]*)""#)
        var keys: Set<String> = []
        for (line, _) in try WireVocabularyTests.codeLines(in: ["Sources/NimbusWire"]) {
            for match in line.matches(of: pattern) { keys.insert(String(match.output[1].substring ?? "")) }
        }
        return keys
    }

    /// What JavaScript and the browser define that the script reads: methods and properties of
    /// arrays, strings, numbers, promises, JSON, Math, Date, storage, location, history, events
    /// and elements. Not answer keys; a new one the script starts to use is added here.
    static let javaScriptNames: Set<String> = [
        // Arrays, strings, numbers, objects
        "map", "filter", "flatMap", "reduce", "forEach", "find", "some", "every", "includes", "join", "slice", "sort", "shift", "length",
        "split", "trim", "replace", "startsWith", "endsWith", "toFixed", "isArray", "isNaN", "from", "assign", "keys", "entries",
        "values", "push", "has", "get", "set", "add", "delete", "size",
        // JSON, Math, Date, promises, fetch's response, errors
        "parse", "stringify", "abs", "max", "min", "floor", "round", "now", "toISOString", "toLocaleString", "then", "catch", "finally",
        "json", "ok", "message", "encode",
        // Location, history, storage
        "hash", "pathname", "reload", "replaceState", "getItem", "setItem", "removeItem",
        // Events and elements
        "addEventListener", "preventDefault", "target", "getElementById", "querySelector", "querySelectorAll", "createElement",
        "createElementNS", "rows", "append", "replaceChildren", "setAttribute", "closest", "children", "dataset", "elements", "files",
        "focus", "scrollIntoView", "toggle", "remove", "reset", "options", "prompt",
    ]

    /// The script's code with comments, quoted strings and regular expressions blanked, and of
    /// each template literal only its `${…}` expressions: what is left is code to scan.
    static func code(ofScript script: String) -> String {
        let characters = Array(script)
        var code: [Character] = []
        var index = 0
        var templateDepths: [Int] = []  // for each `${` open, how many braces are open inside it
        var inTemplate = false
        func lastCodeCharacter() -> Character? { code.last { !$0.isWhitespace } }
        while index < characters.count {
            let character = characters[index]
            let next: Character? = index + 1 < characters.count ? characters[index + 1] : nil
            if inTemplate {
                if character == "\\" {
                    index += 2
                } else if character == "`" {
                    inTemplate = false
                    code += " \"\" "
                    index += 1
                } else if character == "$", next == "{" {
                    templateDepths.append(0)
                    inTemplate = false
                    code.append(" ")
                    index += 2
                } else {
                    index += 1
                }
                continue
            }
            switch character {
            case "/" where next == "/":
                while index < characters.count, characters[index] != "\n" { index += 1 }
            case "/" where next == "*":
                index += 2
                while index + 1 < characters.count, !(characters[index] == "*" && characters[index + 1] == "/") { index += 1 }
                index += 2
            case "/" where lastCodeCharacter().map { "=(,:;!&|?{}[".contains($0) } ?? true:
                // A regular expression: to its closing slash, outside any [class].
                index += 1
                var inClass = false
                while index < characters.count {
                    let inside = characters[index]
                    if inside == "\\" {
                        index += 2
                        continue
                    }
                    if inside == "[" { inClass = true } else if inside == "]" { inClass = false } else if inside == "/", !inClass { break }
                    index += 1
                }
                index += 1
                code += " /x/ "
            case "'", "\"":
                index += 1
                while index < characters.count, characters[index] != character { index += characters[index] == "\\" ? 2 : 1 }
                index += 1
                code += " \"\" "
            case "`":
                inTemplate = true
                index += 1
            case "{" where !templateDepths.isEmpty:
                templateDepths[templateDepths.count - 1] += 1
                code.append(character)
                index += 1
            case "}" where !templateDepths.isEmpty:
                if templateDepths[templateDepths.count - 1] == 0 {
                    templateDepths.removeLast()
                    inTemplate = true
                    code.append(" ")
                } else {
                    templateDepths[templateDepths.count - 1] -= 1
                    code.append(character)
                }
                index += 1
            default:
                code.append(character)
                index += 1
            }
        }
        return String(code)
    }

    /// The properties the code reads (`plan.keptFields`, `token?.lastUsedAt`), and the names it
    /// defines itself: object literals' keys and properties it assigns.
    static func propertyNames(inCode code: String) throws -> (read: [String: Int], defined: Set<String>) {
        let read = try Regex(#"[A-Za-z0-9_$)\]]\??\.([A-Za-z_$][A-Za-z0-9_$]*)"#)
        let literalKey = try Regex(#"[{,]\s*([A-Za-z_$][A-Za-z0-9_$]*)\s*:"#)
        let assigned = try Regex(#"\.([A-Za-z_$][A-Za-z0-9_$]*)\s*=[^=]"#)
        var reads: [String: Int] = [:]
        for match in code.matches(of: read) { reads[String(match.output[1].substring ?? ""), default: 0] += 1 }
        var defined: Set<String> = []
        for match in code.matches(of: literalKey) { defined.insert(String(match.output[1].substring ?? "")) }
        for match in code.matches(of: assigned) { defined.insert(String(match.output[1].substring ?? "")) }
        return (reads, defined)
    }

    /// The properties `script` reads that are neither NimbusWire's keys, its own names, nor
    /// JavaScript's.
    static func unknownReads(in script: String) throws -> [String] {
        let (reads, defined) = try propertyNames(inCode: code(ofScript: script))
        let known = try vocabulary().union(defined).union(javaScriptNames)
        return reads.keys.filter { !known.contains($0) }.sorted()
    }

    static func dashboardScript() throws -> String {
        try String(contentsOf: root.appendingPathComponent("Sources/NimbusServer/Dashboard/dashboard.js"), encoding: .utf8)
    }

    @Test func theDashboardReadsOnlyTheAdminAPIsVocabulary() throws {
        let script = try Self.dashboardScript()
        #expect(script.count > 10_000, "the dashboard's script was not found under \(Self.root.path)")
        for name in try Self.unknownReads(in: script) {
            Issue.record(
                "dashboard.js reads .\(name), which no NimbusWire key names and the script does not define: a key renamed or misspelled? (JavaScript's own names are listed in ConsoleVocabularyTests.javaScriptNames)")
        }
    }

    @Test func theDashboardScanCatchesAMisspelledKey() throws {
        let script = try Self.dashboardScript()
        // Negative controls: a misspelled answer key is caught, in code and inside a template's
        // expression; the same words in a comment, a string or a template's text are not code.
        let misspelled = script + "\nconst kept = plan.keptFeilds;\nconst line = `${token.lastUsedAtt} seen`;\n"
        #expect(try Self.unknownReads(in: misspelled) == ["keptFeilds", "lastUsedAtt"])
        let quoted = script + "\n// plan.keptFeilds\nconst text = 'plan.keptFeilds';\nconst line = `see plan.keptFeilds`;\n"
        #expect(try Self.unknownReads(in: quoted).isEmpty)
        // The vocabulary holds the admin API's keys and the protocol's.
        let vocabulary = try Self.vocabulary()
        #expect(vocabulary.isSuperset(of: ["keptFields", "lastUsedAt", "recordName", "operator", "public"]))
    }
}
