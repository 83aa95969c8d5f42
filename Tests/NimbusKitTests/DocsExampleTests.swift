import Foundation
import Testing

/// docs/testing.md shows its example test in full; the copy there must be the test that runs.
@Suite("docs/testing.md's example is the test in the suite")
struct DocsExampleTests {
    @Test("the guide's example block equals TestingGuideExample.swift between its markers")
    func exampleMatches() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("docs/testing.md"), encoding: .utf8)
        let test = try String(contentsOf: root.appendingPathComponent("Tests/NimbusKitTests/TestingGuideExample.swift"), encoding: .utf8)
        let marker = "<!-- example: Tests/NimbusKitTests/TestingGuideExample.swift -->\n```swift\n"
        let start = try #require(guide.range(of: marker)).upperBound
        let end = try #require(guide.range(of: "```\n", range: start..<guide.endIndex)).lowerBound
        let begin = try #require(test.range(of: "// BEGIN EXAMPLE\n")).upperBound
        let finish = try #require(test.range(of: "// END EXAMPLE")).lowerBound
        #expect(String(guide[start..<end]) == String(test[begin..<finish]))
    }
}
