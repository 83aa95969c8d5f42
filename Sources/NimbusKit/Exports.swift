// `import CloudKit` brings Foundation (and CoreLocation's CLLocation) with it; so does
// `import NimbusKit`, so an app's files compile after changing only that import.
@_exported import Foundation
