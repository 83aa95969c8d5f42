// Declarations of the part of Apple's CoreLocation NimbusKit uses (CLLocation and its
// coordinate), written from Apple's documentation so that scripts/apple-api-check.sh can
// type-check NimbusKit against CoreLocation's real shape on Linux: a C struct coordinate that is
// not Equatable, an NSObject subclass whose initialisers and properties are CoreLocation's. Never
// linked, never run.
import Foundation

public typealias CLLocationDegrees = Double
public typealias CLLocationDistance = Double
public typealias CLLocationAccuracy = Double
public typealias CLLocationDirection = Double
public typealias CLLocationDirectionAccuracy = Double
public typealias CLLocationSpeed = Double
public typealias CLLocationSpeedAccuracy = Double

/// A C struct on Apple platforms: Sendable (trivial fields), neither Equatable nor Hashable.
public struct CLLocationCoordinate2D: Sendable {
    public var latitude: CLLocationDegrees
    public var longitude: CLLocationDegrees
    public init() { fatalError() }
    public init(latitude: CLLocationDegrees, longitude: CLLocationDegrees) { fatalError() }
}

public func CLLocationCoordinate2DMake(_ latitude: CLLocationDegrees, _ longitude: CLLocationDegrees) -> CLLocationCoordinate2D { fatalError() }
public func CLLocationCoordinate2DIsValid(_ coord: CLLocationCoordinate2D) -> Bool { fatalError() }

open class CLFloor: NSObject {
    open var level: Int { fatalError() }
}

/// Sendable in the SDKs NimbusKit supports (iOS 17, macOS 14: `CLLocationUpdate` hands it across tasks).
open class CLLocation: NSObject, NSCopying, NSSecureCoding, @unchecked Sendable {
    public init(latitude: CLLocationDegrees, longitude: CLLocationDegrees) { fatalError() }
    public init(
        coordinate: CLLocationCoordinate2D, altitude: CLLocationDistance, horizontalAccuracy: CLLocationAccuracy,
        verticalAccuracy: CLLocationAccuracy, timestamp: Date
    ) { fatalError() }
    public init(
        coordinate: CLLocationCoordinate2D, altitude: CLLocationDistance, horizontalAccuracy: CLLocationAccuracy,
        verticalAccuracy: CLLocationAccuracy, course: CLLocationDirection, speed: CLLocationSpeed, timestamp: Date
    ) { fatalError() }
    public init(
        coordinate: CLLocationCoordinate2D, altitude: CLLocationDistance, horizontalAccuracy: CLLocationAccuracy,
        verticalAccuracy: CLLocationAccuracy, course: CLLocationDirection, courseAccuracy: CLLocationDirectionAccuracy,
        speed: CLLocationSpeed, speedAccuracy: CLLocationSpeedAccuracy, timestamp: Date
    ) { fatalError() }
    public required init?(coder: NSCoder) { fatalError() }

    open var coordinate: CLLocationCoordinate2D { fatalError() }
    open var altitude: CLLocationDistance { fatalError() }
    open var ellipsoidalAltitude: CLLocationDistance { fatalError() }
    open var horizontalAccuracy: CLLocationAccuracy { fatalError() }
    open var verticalAccuracy: CLLocationAccuracy { fatalError() }
    open var course: CLLocationDirection { fatalError() }
    open var courseAccuracy: CLLocationDirectionAccuracy { fatalError() }
    open var speed: CLLocationSpeed { fatalError() }
    open var speedAccuracy: CLLocationSpeedAccuracy { fatalError() }
    open var timestamp: Date { fatalError() }
    open var floor: CLFloor? { fatalError() }
    open func distance(from location: CLLocation) -> CLLocationDistance { fatalError() }

    public func copy(with zone: NSZone? = nil) -> Any { fatalError() }
    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) { fatalError() }
}
