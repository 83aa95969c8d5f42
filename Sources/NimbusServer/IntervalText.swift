/// A length of time as an operator writes it on a command line: `30s`, `15m`, `6h`, `1d`.
public enum IntervalText {
    public static func parse(_ text: String) -> Duration? {
        guard let unit = text.last, let count = Int64(text.dropLast()), count > 0 else { return nil }
        switch unit {
        case "s": return .seconds(count)
        case "m": return .seconds(count * 60)
        case "h": return .seconds(count * 3_600)
        case "d": return .seconds(count * 86_400)
        default: return nil
        }
    }
}
