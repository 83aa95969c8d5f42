import NIOCore
import NimbusStorage
import PostgresNIO

/// A row's cells read in order, each as one concrete type.
///
/// postgres-nio's `row.decode((Int64, String, …).self)` walks a variadic tuple through generic
/// code the compiler does not specialize across modules: every column looks up its type's
/// metadata and calls through witness tables. With a query page's 20 records of 14 columns
/// that was about 9% of a PostgreSQL node's CPU for a filtered list, and copying the row
/// into an array to reach its sort keys another 3% (`perf`, docs/benchmarks.md). Here each
/// read names its type where it is called, so the decode is specialized and inlined.
struct PostgresCells {
    private var cells: PostgresRow.Iterator
    private(set) var read = 0

    init(_ row: PostgresRow) {
        cells = row.makeIterator()
    }

    /// The next cell as `T`, or a corrupt-row error if the row has no more cells.
    @inline(__always)
    mutating func next<T: PostgresDecodable>(_: T.Type = T.self) throws -> T {
        guard let cell = cells.next() else { throw StorageError.corrupt("a row ends after \(read) columns") }
        read += 1
        return try cell.decode(T.self)
    }

    /// Passes over `count` cells.
    mutating func skip(_ count: Int = 1) {
        for _ in 0..<count where cells.next() != nil { read += 1 }
    }
}
