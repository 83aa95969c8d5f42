/// The keys of the admin API's JSON (`/admin/1/`, docs/dashboard.md) that the server and the
/// `nimbus` command line both read or write, each spelled once, as `WireKey` does for the
/// CloudKit protocol: `WireVocabularyTests` fails when the command line spells a JSON key the
/// server also spells. The dashboard's script reads the same names (docs/dashboard.md).
public enum ConsoleKey {
    // MARK: Operators and their sessions

    public static let name = "name"
    public static let password = "password"
    /// An authenticator's six digits, for an operator with a second factor.
    public static let code = "code"
    public static let csrfToken = "csrfToken"
    /// The signed-in operator's own dictionary, in a session's answer.
    public static let operatorAccount = "operator"
    public static let role = "role"
    public static let createdAt = "createdAt"
    public static let secondFactor = "secondFactor"
    public static let disabled = "disabled"
    public static let containers = "containers"
    public static let oneTimePasswordExpiresAt = "oneTimePasswordExpiresAt"

    // MARK: Schema text

    public static let text = "text"
    public static let missing = "missing"

    // MARK: The sync doctor (docs/sync-doctor.md)

    public static let user = "user"
    public static let container = "container"
    public static let environment = "environment"
    public static let retentionDays = "retentionDays"
    public static let behindLimit = "behindLimit"
    public static let devices = "devices"
    public static let deviceID = "deviceID"
    public static let lastSeen = "lastSeen"
    public static let database = "database"
    public static let zones = "zones"
    public static let zone = "zone"
    public static let zonesNeverFetched = "zonesNeverFetched"
    public static let fetchedAt = "fetchedAt"
    public static let status = "status"
    public static let behind = "behind"
    public static let reason = "reason"
    public static let push = "push"
    public static let missed = "missed"
    public static let lastSentAt = "lastSentAt"
    public static let oldestMissedAt = "oldestMissedAt"
}

/// The header a change to the admin API must carry, echoing the session's CSRF token (the
/// cookie alone could be carried by another site's form).
public enum ConsoleHeader {
    public static let csrf = "X-Nimbus-CSRF"
}
