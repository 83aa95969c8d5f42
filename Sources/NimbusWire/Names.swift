/// The naming rules for records, zones, record types and fields.
///
/// Record names: 1–255 bytes of printable ASCII (spaces allowed, as in CloudKit's own
/// examples), not starting with `_`, which marks system names; of those only user record
/// names (`_` and 32 hex digits, the records of type Users) may be named in requests.
/// Zone names: the same, or exactly `_defaultZone`. Record types and field names: a letter,
/// then letters, digits and `_` (the CloudKit Schema Language's identifiers).
public enum Names {
    public static let defaultZone = "_defaultZone"
    public static let defaultOwner = "_defaultOwner"
    /// The record type of each user's record in a container's public database.
    public static let usersRecordType = "Users"
    /// The record type of shares (sent in any case; `cloudKit.share` in Apple's own pages).
    public static let shareRecordType = "cloudkit.share"
    /// The record name of a zone-wide share.
    public static let zoneWideShareName = "cloudkit.zoneshare"
    /// The system fields a share has besides the app's own.
    public static let shareFieldNames: Set<String> = ["cloudkit.title", "cloudkit.type", "cloudkit.thumbnailImageData"]
    /// Fields the server keeps in a record for itself (a share's participants, a root's
    /// share); no client can name one, since an identifier starts with a letter.
    public static let reservedFieldPrefix = "___"
    /// The device of a request that names none, as Apple's web services report it.
    public static let anonymousDevice = "iCloud"

    /// Whether `name` is one of a share's system fields (`shareFieldNames`), looked up only
    /// for a name that starts as they do (a save asks it of every field).
    public static func isShareFieldName(_ name: String) -> Bool {
        name.hasPrefix("cloudkit.") && shareFieldNames.contains(name)
    }

    /// Whether a name is a user record name: `_` and 32 lowercase hex digits.
    public static func isUserRecordName(_ name: String) -> Bool {
        let bytes = name.utf8
        return bytes.count == 33 && bytes.first == UInt8(ascii: "_")
            && bytes.dropFirst().allSatisfy { isDigit($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    // The checks below read the name's bytes in place and spell out `path` only for an error:
    // a batch's request names 200 records and their fields, and building each one's path up
    // front (and copying its name into an array) was a fifth of reading a record's input.

    public static func validateRecordName(_ name: String, path: @autoclosure () -> String) throws(CloudKitError) {
        try validatePrintable(name, kind: "record name", path: path())
        if name.hasPrefix("_"), !isUserRecordName(name) {
            throw .badRequest("\(path()): record names starting with '_' are reserved for system records ('\(name)')")
        }
    }

    public static func validateZoneName(_ name: String, path: @autoclosure () -> String) throws(CloudKitError) {
        if name == defaultZone { return }
        try validatePrintable(name, kind: "zone name", path: path())
        if name.hasPrefix("_") {
            throw .badRequest("\(path()): zone names starting with '_' are reserved ('\(name)')")
        }
    }

    public static func validateIdentifier(_ name: String, kind: String, path: @autoclosure () -> String) throws(CloudKitError) {
        let bytes = name.utf8
        guard let first = bytes.first else { throw .badRequest("\(path()): the \(kind) is empty") }
        guard bytes.count <= Limits.nameBytes.value else {
            throw .limitExceeded(Limits.nameBytes, actual: bytes.count, what: "\(path()): the \(kind)'s length")
        }
        guard isLetter(first), bytes.allSatisfy({ isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "_") }) else {
            // A share's own fields and type are named outside the identifier rules.
            if isShareFieldName(name) || name == shareRecordType { return }
            throw .badRequest(
                "\(path()): '\(escaped(name))' is not a valid \(kind); use a letter followed by letters, digits or '_'")
        }
    }

    private static func validatePrintable(_ name: String, kind: String, path: @autoclosure () -> String) throws(CloudKitError) {
        let bytes = name.utf8
        guard !bytes.isEmpty else { throw .badRequest("\(path()): the \(kind) is empty") }
        guard bytes.count <= Limits.nameBytes.value else {
            throw .limitExceeded(Limits.nameBytes, actual: bytes.count, what: "\(path()): the \(kind)'s length")
        }
        guard bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw .badRequest("\(path()): the \(kind) '\(escaped(name))' has characters outside printable ASCII")
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
