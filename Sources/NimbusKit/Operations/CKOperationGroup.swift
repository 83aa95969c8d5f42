import Foundation

/// Operations that do one piece of the app's work together (an initial sync, an import): they
/// share a `defaultConfiguration` for what their own configurations leave unset, and the
/// group's name and expected sizes describe the work. CloudKit reports groups in its
/// telemetry; Nimbus keeps them for the configuration only.
open class CKOperationGroup: NSObject, @unchecked Sendable {
    /// How much a group expects to send or receive.
    public enum TransferSize: Int, Sendable {
        case unknown = 0
        case kilobytes = 1
        case megabytes = 2
        case tensOfMegabytes = 3
        case hundredsOfMegabytes = 4
        case gigabytes = 5
        case tensOfGigabytes = 6
        case hundredsOfGigabytes = 7
    }

    public let operationGroupID: String = UUID().uuidString
    public var defaultConfiguration: CKOperation.Configuration! = CKOperation.Configuration()
    public var name: String?
    /// How many of a kind of item the group works on (records, say).
    public var quantity: Int = 0
    public var expectedSendSize: TransferSize = .unknown
    public var expectedReceiveSize: TransferSize = .unknown

    public override init() { super.init() }
}
