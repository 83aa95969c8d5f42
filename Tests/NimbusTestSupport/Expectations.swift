import Testing

/// `#expect(actual == expected)`, compiled once here instead of at every call site.
///
/// `#expect(a == b)` expands to a closure, `{ $0 == $1() }`, whose operand types the compiler
/// must infer against every `==` the test module can see (JSON's literals, NIO's, HTTPTypes',
/// Foundation's): about half a second of type-checking per expectation in NimbusServerTests,
/// however simple the operands. A generic function pins both operands to one type first. On
/// RecordTests.swift (95 expectations, 83 of them equalities) the file compiled in 26 s instead
/// of 35 (2026-11-30). A failure reports both values and the caller's line, as `#expect` does;
/// it names the values `actual` and `expected` instead of quoting the caller's expressions.
/// Keep `#expect` for anything that is not one equality (`&&`, `!=`, `<`, `contains`).
public func expectEqual<Value: Equatable>(
    _ actual: Value, _ expected: Value, _ comment: @autoclosure () -> Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(actual == expected, comment(), sourceLocation: sourceLocation)
}
