import Synchronization
import Tracing

/// Spans for a request, its storage calls and its pushes (docs/operations.md, "Traces"),
/// through swift-distributed-tracing. Off unless `nimbus serve --otlp-endpoint` bootstraps a
/// tracer: then every call here pays one atomic load and nothing else (the tracing API would
/// otherwise read its global tracer under a lock on every storage call).
public enum Spans {
    private static let enabled = Atomic<Bool>(false)

    /// Called once a tracer is bootstrapped.
    public static func enable() { enabled.store(true, ordering: .relaxed) }

    public static var areOn: Bool { enabled.load(ordering: .relaxed) }

    /// Whether the running task works for a traced request or push: storage calls made by the
    /// background loops (the notification pipeline polls four times a second) make no spans of
    /// their own, which would be traces of one span each, most of what a collector received.
    @TaskLocal static var withinTrace = false

    /// Runs `body` in a span named `name` that starts a trace (a request, a push), or without
    /// one when spans are off.
    /// `context`, when given, carries a trace the caller started (a `traceparent` header): the
    /// span joins it.
    public static func run<Value>(
        _ name: String, kind: SpanKind = .internal, context: ServiceContext? = nil, _ body: (_ span: (any Span)?) async throws -> Value
    ) async rethrows -> Value {
        guard areOn else { return try await body(nil) }
        return try await withSpan(name, context: context ?? .current ?? .topLevel, ofKind: kind) { span in
            try await $withinTrace.withValue(true) { try await body(span) }
        }
    }

    /// The trace a request's headers name (W3C `traceparent`, or what the bootstrapped
    /// propagators read), as the context of its span.
    public static func context<E: Extractor>(from carrier: E.Carrier, using extractor: E) -> ServiceContext {
        var context = ServiceContext.topLevel
        InstrumentationSystem.instrument.extract(carrier, into: &context, using: extractor)
        return context
    }

    /// Runs `body` in a span named `name` inside the task's trace; without one when spans are
    /// off or the task belongs to no trace.
    public static func child<Value>(_ name: String, _ body: (_ span: (any Span)?) async throws -> Value) async rethrows -> Value {
        guard areOn, withinTrace else { return try await body(nil) }
        return try await withSpan(name, ofKind: .internal) { span in try await body(span) }
    }
}
