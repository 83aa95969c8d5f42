extension Duration {
    /// The whole nanoseconds, for budgets and counters kept as integers; a duration past
    /// Int64's range of nanoseconds (about 292 years) counts as Int64.max / 2, never wraps.
    public var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max / 2 : scaled + attoseconds / 1_000_000_000
    }
}
