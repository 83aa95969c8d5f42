import Foundation

/// A parser for CloudKit's subset of the `NSPredicate` format language, for platforms whose
/// Foundation cannot parse format strings. It accepts the whole grammar's shape (so it can
/// name what is unsupported) and leaves deciding what CloudKit supports to the translator.
///
///     predicate  := or
///     or         := and (("OR" | "||") and)*
///     and        := not (("AND" | "&&") not)*
///     not        := ("NOT" | "!") not | "(" predicate ")" | TRUEPREDICATE | FALSEPREDICATE | comparison
///     comparison := [ANY | ALL | SOME | NONE] expression operator expression
///     expression := %@ | %K | %d… | 'string' | number | TRUE | FALSE | YES | NO | SELF
///                 | { expression, … } | name ( expression, … ) | key.path
struct PredicateParser {
    private var tokens: [Token] = []
    private var position = 0
    private let format: String
    private var arguments: [Any]
    private var argumentIndex = 0

    init(format: String, arguments: [Any]) {
        self.format = format
        self.arguments = arguments
    }

    mutating func parse() throws(CKError) -> PredicateNode {
        tokens = try Self.tokenize(format)
        let node = try parseOr()
        guard position == tokens.count else {
            throw invalid("unexpected '\(tokens[position].text)' after a complete predicate")
        }
        guard argumentIndex == arguments.count else {
            throw invalid("\(arguments.count) arguments given but the format uses \(argumentIndex)")
        }
        return node
    }

    // MARK: Tokens

    enum TokenKind: Equatable { case word, string, number, symbol, placeholder }

    struct Token {
        var kind: TokenKind
        var text: String
        /// Where the token starts, for error messages.
        var offset: Int
    }

    private static let symbols = ["==", "!=", "<>", "<=", "=<", ">=", "=>", "&&", "||", "=", "<", ">", "!", "(", ")", "{", "}", ",", "[", "]"]

    static func tokenize(_ format: String) throws(CKError) -> [Token] {
        let characters = Array(format)
        var tokens: [Token] = []
        var index = 0
        func invalid(_ message: String) -> CKError {
            CKError(.invalidArguments, "invalid predicate format \(format.debugDescription): \(message)")
        }
        while index < characters.count {
            let character = characters[index]
            if character.isWhitespace {
                index += 1
                continue
            }
            let start = index
            if character == "'" || character == "\"" {
                var text = ""
                index += 1
                while index < characters.count, characters[index] != character {
                    if characters[index] == "\\", index + 1 < characters.count { index += 1 }
                    text.append(characters[index])
                    index += 1
                }
                guard index < characters.count else { throw invalid("unterminated string starting at offset \(start)") }
                index += 1
                tokens.append(Token(kind: .string, text: text, offset: start))
            } else if character == "%" {
                index += 1
                var spec = ""
                while index < characters.count, characters[index].isLetter || characters[index] == "@" {
                    spec.append(characters[index])
                    index += 1
                    if spec.last == "@" || (spec.last.map { "KdiufsDUxXeEgGc".contains($0) } ?? false) { break }
                }
                guard !spec.isEmpty else { throw invalid("'%' at offset \(start) is not followed by a format specifier") }
                tokens.append(Token(kind: .placeholder, text: "%" + spec, offset: start))
            } else if character.isNumber || (character == "-" && index + 1 < characters.count && characters[index + 1].isNumber) {
                var text = String(character)
                index += 1
                while index < characters.count, characters[index].isNumber || characters[index] == "." || characters[index] == "e" {
                    text.append(characters[index])
                    index += 1
                }
                tokens.append(Token(kind: .number, text: text, offset: start))
            } else if character.isLetter || character == "_" || character == "$" || character == "#" || character == "@" {
                var text = ""
                while index < characters.count,
                    characters[index].isLetter || characters[index].isNumber || "_.$:#@".contains(characters[index])
                {
                    text.append(characters[index])
                    index += 1
                }
                tokens.append(Token(kind: .word, text: text, offset: start))
            } else if let symbol = symbols.first(where: { symbol in
                Array(symbol).enumerated().allSatisfy { index + $0.offset < characters.count && characters[index + $0.offset] == $0.element }
            }) {
                index += symbol.count
                tokens.append(Token(kind: .symbol, text: symbol, offset: start))
            } else {
                throw invalid("unexpected character '\(character)' at offset \(start)")
            }
        }
        return tokens
    }

    // MARK: Grammar

    private var current: Token? { position < tokens.count ? tokens[position] : nil }

    private func isKeyword(_ token: Token?, _ words: String...) -> Bool {
        guard let token, token.kind == .word || token.kind == .symbol else { return false }
        return words.contains { $0.caseInsensitiveCompare(token.text) == .orderedSame }
    }

    private mutating func parseOr() throws(CKError) -> PredicateNode {
        var nodes = [try parseAnd()]
        while isKeyword(current, "OR", "||") {
            position += 1
            nodes.append(try parseAnd())
        }
        return nodes.count == 1 ? nodes[0] : .or(nodes)
    }

    private mutating func parseAnd() throws(CKError) -> PredicateNode {
        var nodes = [try parseNot()]
        while isKeyword(current, "AND", "&&") {
            position += 1
            nodes.append(try parseNot())
        }
        return nodes.count == 1 ? nodes[0] : .and(nodes)
    }

    private mutating func parseNot() throws(CKError) -> PredicateNode {
        if isKeyword(current, "NOT", "!") {
            position += 1
            return .not(try parseNot())
        }
        if isKeyword(current, "TRUEPREDICATE") {
            position += 1
            return .truePredicate
        }
        if isKeyword(current, "FALSEPREDICATE") {
            position += 1
            return .falsePredicate
        }
        if current?.kind == .symbol, current?.text == "(", startsPredicateGroup() {
            position += 1
            let node = try parseOr()
            try expect(")")
            return node
        }
        return try parseComparison()
    }

    /// Whether the "(" at the current position opens a parenthesised predicate rather than
    /// an expression: a predicate group contains an operator before its matching ")".
    private func startsPredicateGroup() -> Bool {
        var depth = 0
        var index = position
        while index < tokens.count {
            let token = tokens[index]
            if token.kind == .symbol, token.text == "(" { depth += 1 }
            if token.kind == .symbol, token.text == ")" {
                depth -= 1
                if depth == 0 { return false }
            }
            if depth == 1, Self.comparisonOperator(token) != nil || isKeyword(token, "AND", "OR", "&&", "||", "NOT") {
                return true
            }
            index += 1
        }
        return false
    }

    private mutating func parseComparison() throws(CKError) -> PredicateNode {
        let startOffset = current?.offset ?? format.count
        var modifier = PredicateComparison.Modifier.direct
        if isKeyword(current, "ANY", "SOME") {
            modifier = .any
            position += 1
        } else if isKeyword(current, "ALL") {
            modifier = .all
            position += 1
        } else if isKeyword(current, "NONE") {
            throw invalid("NONE is not supported in CloudKit queries")
        }
        let left = try parseExpression()
        guard let token = current, let op = Self.comparisonOperator(token) else {
            throw invalid("expected a comparison operator after '\(describe(left))'\(current.map { ", found '\($0.text)'" } ?? "")")
        }
        position += 1
        // Options such as [cd] after a string operator: CloudKit's matching is fixed, so they
        // are accepted and ignored.
        if current?.kind == .symbol, current?.text == "[" {
            while let token = current, !(token.kind == .symbol && token.text == "]") { position += 1 }
            try expect("]")
        }
        let right = try parseExpression()
        let endOffset = current?.offset ?? format.count
        let text = String(Array(format)[startOffset..<endOffset]).trimmingCharacters(in: .whitespaces)
        return .comparison(PredicateComparison(modifier: modifier, left: left, op: op, right: right, text: text))
    }

    private static func comparisonOperator(_ token: Token) -> PredicateComparison.Operator? {
        switch token.kind {
        case .symbol:
            switch token.text {
            case "=", "==": return .equal
            case "!=", "<>": return .notEqual
            case "<": return .less
            case "<=", "=<": return .lessOrEqual
            case ">": return .greater
            case ">=", "=>": return .greaterOrEqual
            default: return nil
            }
        case .word:
            switch token.text.uppercased() {
            case "IN": return .in
            case "BEGINSWITH": return .beginsWith
            case "CONTAINS": return .contains
            case "BETWEEN": return .between
            case "ENDSWITH": return .endsWith
            case "LIKE": return .like
            case "MATCHES": return .matches
            default: return nil
            }
        default: return nil
        }
    }

    private mutating func parseExpression() throws(CKError) -> PredicateExpression {
        guard let token = current else { throw invalid("the format ends where a value or key was expected") }
        position += 1
        switch token.kind {
        case .string:
            return .constant(token.text)
        case .number:
            if let int = Int64(token.text) { return .constant(NSNumber(value: int)) }
            guard let double = Double(token.text) else { throw invalid("'\(token.text)' is not a number") }
            return .constant(NSNumber(value: double))
        case .placeholder:
            guard argumentIndex < arguments.count else {
                throw invalid("'\(token.text)' at offset \(token.offset) has no argument (only \(arguments.count) given)")
            }
            let argument = arguments[argumentIndex]
            argumentIndex += 1
            if token.text == "%K" {
                guard let key = argument as? String else { throw invalid("the argument for %K must be a key name (a String)") }
                return .key(key)
            }
            return .constant(argument)
        case .symbol where token.text == "{":
            var members: [PredicateExpression] = []
            if !(current?.kind == .symbol && current?.text == "}") {
                repeat {
                    members.append(try parseExpression())
                } while consume(",")
            }
            try expect("}")
            return .aggregate(members)
        case .word:
            switch token.text.uppercased() {
            case "TRUE", "YES": return .constant(NSNumber(value: true))
            case "FALSE", "NO": return .constant(NSNumber(value: false))
            case "SELF": return .evaluatedObject
            case "NIL", "NULL": throw invalid("comparing with nil is not supported in CloudKit queries")
            default: break
            }
            if current?.kind == .symbol, current?.text == "(" {
                position += 1
                var arguments: [PredicateExpression] = []
                if !(current?.kind == .symbol && current?.text == ")") {
                    repeat {
                        arguments.append(try parseExpression())
                    } while consume(",")
                }
                try expect(")")
                return .function(token.text, arguments)
            }
            return .key(token.text.hasPrefix("#") ? String(token.text.dropFirst()) : token.text)
        default:
            throw invalid("unexpected '\(token.text)' at offset \(token.offset)")
        }
    }

    private mutating func consume(_ symbol: String) -> Bool {
        guard let token = current, token.kind == .symbol, token.text == symbol else { return false }
        position += 1
        return true
    }

    private mutating func expect(_ symbol: String) throws(CKError) {
        guard consume(symbol) else {
            throw invalid("expected '\(symbol)'\(current.map { " at offset \($0.offset), found '\($0.text)'" } ?? " before the end")")
        }
    }

    private func describe(_ expression: PredicateExpression) -> String {
        switch expression {
        case .key(let key): return key
        case .constant(let value): return "\(value)"
        case .evaluatedObject: return "SELF"
        case .function(let name, _): return "\(name)(…)"
        case .aggregate: return "{…}"
        }
    }

    private func invalid(_ message: String) -> CKError {
        CKError(.invalidArguments, "invalid predicate format \(format.debugDescription): \(message)")
    }
}
