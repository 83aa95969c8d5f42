import Foundation

#if canImport(CoreLocation)
@_exported import CoreLocation
#else
/// A latitude and longitude in degrees, as CoreLocation has it.
public struct CLLocationCoordinate2D: Sendable, Hashable {
    public var latitude: Double
    public var longitude: Double
    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
    public init() { self.init(latitude: 0, longitude: 0) }
}

public typealias CLLocationDistance = Double
public typealias CLLocationDegrees = Double

/// CoreLocation's `CLLocation` for platforms without CoreLocation (Linux): what record fields
/// and location queries need, with the same names.
open class CLLocation: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    public let coordinate: CLLocationCoordinate2D
    public let altitude: Double
    public let horizontalAccuracy: Double
    public let verticalAccuracy: Double
    public let course: Double
    public let speed: Double
    public let timestamp: Date

    public init(
        coordinate: CLLocationCoordinate2D, altitude: Double, horizontalAccuracy: Double, verticalAccuracy: Double,
        course: Double, speed: Double, timestamp: Date
    ) {
        self.coordinate = coordinate
        self.altitude = altitude
        self.horizontalAccuracy = horizontalAccuracy
        self.verticalAccuracy = verticalAccuracy
        self.course = course
        self.speed = speed
        self.timestamp = timestamp
    }

    public convenience init(latitude: Double, longitude: Double) {
        self.init(
            coordinate: CLLocationCoordinate2D(latitude: latitude, longitude: longitude), altitude: 0,
            horizontalAccuracy: 0, verticalAccuracy: -1, course: -1, speed: -1, timestamp: Date())
    }

    /// Great-circle distance in meters (haversine on a sphere of the Earth's mean radius).
    public func distance(from location: CLLocation) -> CLLocationDistance {
        let radius = 6_371_008.8
        let lat1 = coordinate.latitude * .pi / 180, lat2 = location.coordinate.latitude * .pi / 180
        let dLat = lat2 - lat1
        let dLon = (location.coordinate.longitude - coordinate.longitude) * .pi / 180
        let a = sin(dLat / 2) * sin(dLat / 2) + cos(lat1) * cos(lat2) * sin(dLon / 2) * sin(dLon / 2)
        return 2 * radius * asin(min(1, sqrt(a)))
    }

    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CLLocation else { return false }
        return coordinate == other.coordinate && altitude == other.altitude
            && horizontalAccuracy == other.horizontalAccuracy
    }
    open override var hash: Int { coordinate.hashValue }
    open override var description: String { "<\(coordinate.latitude),\(coordinate.longitude)>" }
    public func copy(with zone: NSZone? = nil) -> Any { self }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(coordinate.latitude, forKey: "latitude")
        coder.encode(coordinate.longitude, forKey: "longitude")
        coder.encode(altitude, forKey: "altitude")
        coder.encode(horizontalAccuracy, forKey: "horizontalAccuracy")
        coder.encode(verticalAccuracy, forKey: "verticalAccuracy")
        coder.encode(course, forKey: "course")
        coder.encode(speed, forKey: "speed")
        coder.encode(timestamp.timeIntervalSince1970, forKey: "timestamp")
    }
    public required init?(coder: NSCoder) {
        coordinate = CLLocationCoordinate2D(
            latitude: coder.decodeDouble(forKey: "latitude"), longitude: coder.decodeDouble(forKey: "longitude"))
        altitude = coder.decodeDouble(forKey: "altitude")
        horizontalAccuracy = coder.decodeDouble(forKey: "horizontalAccuracy")
        verticalAccuracy = coder.decodeDouble(forKey: "verticalAccuracy")
        course = coder.decodeDouble(forKey: "course")
        speed = coder.decodeDouble(forKey: "speed")
        timestamp = Date(timeIntervalSince1970: coder.decodeDouble(forKey: "timestamp"))
    }
}
#endif
