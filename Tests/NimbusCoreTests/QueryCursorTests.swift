@testable import NimbusCore
import NimbusStorage
import NimbusWire
import Testing

/// A query marker's body is written straight into text; it must be the text earlier builds
/// made from a tree, or every marker a client holds across an upgrade reads as garbled.
@Suite struct QueryCursorTests {
    /// The body as earlier builds made it: a JSON tree, serialized.
    static func treeBody(_ position: QueryPosition, binding: [UInt8]) -> [UInt8] {
        let values: [JSON] = position.sortValues.map {
            switch $0 {
            case .integer(let integer): return .array(["i", .int(integer)])
            case .number(let number): return .array(["n", .double(number)])
            case .text(let text): return .array(["t", .string(text)])
            }
        }
        return JSON.array([.int(1), .string(Credentials.hex(binding)), .array(values), .int(position.recordID)]).serialized()
    }

    static let positions: [QueryPosition] = [
        QueryPosition(sortValues: [], recordID: 1),
        QueryPosition(sortValues: [.integer(-42)], recordID: 9_007_199_254_740_993),
        QueryPosition(sortValues: [.number(0.1), .number(-1e300), .number(3), .number(1.5e-7)], recordID: 7),
        QueryPosition(sortValues: [.text("plain"), .text("quote \" back\\slash\nline\t\u{1} é 🌧")], recordID: 12),
        QueryPosition(sortValues: [.integer(Int64.min), .text(""), .number(-0.0), .integer(Int64.max)], recordID: Int64.max),
    ]

    @Test(arguments: positions) func theBodyIsTheTextATreeOfItWrites(_ position: QueryPosition) throws {
        let binding: [UInt8] = (0..<16).map { UInt8($0 * 17) }
        let written = NimbusService.cursorBody(position, binding: binding)
        #expect(written == Self.treeBody(position, binding: binding), "\(String(decoding: written, as: UTF8.self))")
        // And it reads back as the tree it is.
        #expect(try JSON.parse(written) == JSON.parse(Self.treeBody(position, binding: binding)))
    }
}
