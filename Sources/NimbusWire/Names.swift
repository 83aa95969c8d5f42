/// The naming rules for records, zones, record types and fields.
///
/// Record names: 1–255 bytes of printable ASCII (spaces allowed, as in CloudKit's own
/// examples), not starting with `_`, which marks system names such as user records.
/// Zone names: the same, or exactly `_defaultZone`. Record types and field names: a letter,
/// then letters, digits and `_` (the CloudKit Schema Language's identifiers).
public enum Names {
    public static let defaultZone = "_defaultZone"
    public static let defaultOwner = "_defaultOwner"
    /// The device of a request that names none, as Apple's web services report it.
    public static let anonymousDevice = "iCloud"

    public static func validateRecordName(_ name: String, path: String) throws(CloudKitError) {
        try validatePrintable(name, kind: "record name", path: path)
        if name.hasPrefix("_") {
            throw .badRequest("\(path): record names starting with '_' are reserved for system records ('\(name)')")
        }
    }

    public static func validateZoneName(_ name: String, path: String) throws(CloudKitError) {
        if name == defaultZone { return }
        try validatePrintable(name, kind: "zone name", path: path)
        if name.hasPrefix("_") {
            throw .badRequest("\(path): zone names starting with '_' are reserved ('\(name)')")
        }
    }

    public static func validateIdentifier(_ name: String, kind: String, path: String) throws(CloudKitError) {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty else { throw .badRequest("\(path): the \(kind) is empty") }
        guard bytes.count <= Limits.nameBytes.value else {
            throw .limitExceeded(Limits.nameBytes, actual: bytes.count, what: "\(path): the \(kind)'s length")
        }
        guard isLetter(bytes[0]), bytes.allSatisfy({ isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "_") }) else {
            throw .badRequest(
                "\(path): '\(escaped(name))' is not a valid \(kind); use a letter followed by letters, digits or '_'")
        }
    }

    private static func validatePrintable(_ name: String, kind: String, path: String) throws(CloudKitError) {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty else { throw .badRequest("\(path): the \(kind) is empty") }
        guard bytes.count <= Limits.nameBytes.value else {
            throw .limitExceeded(Limits.nameBytes, actual: bytes.count, what: "\(path): the \(kind)'s length")
        }
        guard bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw .badRequest("\(path): the \(kind) '\(escaped(name))' has characters outside printable ASCII")
        }
    }

    /// A name as it may be echoed in an error: control characters and non-ASCII escaped,
    /// and cut short, so hostile names cannot mangle logs or responses.
    public static func escaped(_ name: String) -> String {
        var result = ""
        for scalar in name.unicodeScalars.prefix(80) {
            if scalar.isASCII, scalar.value >= 0x20, scalar.value < 0x7F {
                result.unicodeScalars.append(scalar)
            } else {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            }
        }
        if name.unicodeScalars.count > 80 { result += "…" }
        return result
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    private static func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
}
