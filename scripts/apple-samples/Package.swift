// swift-tools-version:6.1
import PackageDescription

// Builds one of Apple's CloudKit sample apps' XCTest suites, unmodified, against NimbusKit
// on Linux. `run-sync-engine.sh` links the sample's files into Sample/ (not in git) first.
// The shims stand for what Apple's platforms give the sample through its imports: CloudKit
// (NimbusKit), `os.log`'s Logger and Combine's ObservableObject / @Published.

let package = Package(
    name: "apple-samples",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "nimbus", path: "../..")],
    targets: [
        .target(name: "CloudKit", dependencies: [.product(name: "NimbusKit", package: "nimbus")], path: "Shims/CloudKit"),
        // `import os.log` names a clang submodule: a clang module `os` (with an empty `log`)
        // under a Swift overlay of the same name that carries Logger, as Apple's SDK is built.
        .systemLibrary(name: "OSModuleMap", path: "Shims/os-clang"),
        .target(name: "os", dependencies: ["OSModuleMap"], path: "Shims/os", swiftSettings: [.unsafeFlags(["-import-underlying-module"])]),
        .testTarget(
            name: "SyncEngineSampleTests", dependencies: ["CloudKit", "os"], path: "Sample/SyncEngine",
            swiftSettings: [.swiftLanguageMode(.v5)]),
    ])
