import Logging
import NIOCore
import NimbusTestSupport
import PostgresNIO
import Testing

@testable import NimbusPostgres

/// The apply function's typed arrays (`PostgresArrayColumn`), as PostgreSQL reads them: NULL
/// elements, empty columns, bytes PostgreSQL text could not hold, texts past ASCII, and the
/// exact decimal text a `numeric` is read from.
@Suite(.enabled(if: PostgresTestCluster.url != nil))
struct PostgresArrayColumnTests {
    @Test func columnsArriveAsPostgreSQLArraysWithTheirNulls() async throws {
        try await PostgresTestCluster.withDatabase { location in
            var numbers = PostgresArrayColumn<Int64>()
            for number in [Int64.min, nil, 0, Int64.max] { numbers.append(number) }
            var texts = PostgresArrayColumn<String>()
            for text in ["héllo 🌤", nil, ""] { texts.append(text) }
            var bytes = PostgresArrayColumn<ByteBuffer>()
            bytes.append(bytes: [0, 255, 7] as [UInt8])
            bytes.append(bytes: nil as [UInt8]?)
            bytes.append(bytes: "a\u{0}b".utf8)
            var flags = PostgresArrayColumn<Bool>()
            for flag in [true, false] { flags.append(flag) }
            var doubles = PostgresArrayColumn<Double>()
            for double in [nil, -122.5] { doubles.append(double) }
            var positions = PostgresArrayColumn<Int32>()
            positions.append(-1)
            var decimals = PostgresArrayColumn<String>()
            decimals.append("9223372036854775807")
            let empty = PostgresArrayColumn<Int64>()

            var binds = PostgresBindings()
            for column in [numbers, empty] { binds.append(column) }
            binds.append(texts)
            binds.append(bytes)
            binds.append(flags)
            binds.append(doubles)
            binds.append(positions)
            binds.append(decimals)
            let connection = try await PostgresTestCluster.connect(to: location, logger: Logger(label: "array-columns"))
            defer { Task { try? await connection.close() } }
            let rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT $1 IS NOT DISTINCT FROM ARRAY[-9223372036854775808, NULL, 0, 9223372036854775807]::bigint[],
                            cardinality($2::bigint[]) = 0,
                            $3 IS NOT DISTINCT FROM ARRAY['héllo 🌤', NULL, '']::text[],
                            $4 IS NOT DISTINCT FROM ARRAY['\\x00ff07'::bytea, NULL, '\\x610062'::bytea],
                            $5 = ARRAY[true, false],
                            $6 IS NOT DISTINCT FROM ARRAY[NULL, -122.5]::double precision[],
                            $7 = ARRAY[-1]::integer[],
                            ($8::text[])[1]::numeric = 9223372036854775807::numeric,
                            (SELECT count(*) FROM unnest($1::bigint[], $3::text[]) AS u(n, t) WHERE t IS NULL OR n IS NULL)
                        """, binds: binds), logger: Logger(label: "array-columns")
            ).collect()
            let row = try #require(rows.first)
            let (sameNumbers, emptyIsEmpty, sameTexts, sameBytes, sameFlags, sameDoubles, samePositions, exactDecimal, nullRows) =
                try row.decode((Bool, Bool, Bool, Bool, Bool, Bool, Bool, Bool, Int64).self)
            #expect(sameNumbers && emptyIsEmpty && sameTexts && sameBytes && sameFlags && sameDoubles && samePositions && exactDecimal)
            // unnest pads the shorter column with NULLs: two rows of four have one.
            expectEqual(nullRows, 2)
        }
    }
}
