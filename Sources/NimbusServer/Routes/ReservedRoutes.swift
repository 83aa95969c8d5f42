import NimbusWire

/// Endpoints of the protocol that later Nimbus features serve: each answers `NOT_FOUND` saying
/// so, rather than "no such endpoint". An area that implements one removes it from here.
enum ReservedRoutes {
    static let paths = [
        "users/lookup/contacts",
    ]

    static let routes: [Route] = paths.map { path in
        Route(path, .reads) { _ in throw CloudKitError(.notFound, "\(path) is not available in this Nimbus version yet") }
    }
}
