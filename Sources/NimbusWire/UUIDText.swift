import Foundation

/// Identifiers for errors and server-assigned record names: random (version 4) UUIDs.
public enum UUIDText {
    public static func random() -> String { UUID().uuidString }
}
