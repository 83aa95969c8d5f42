/// The keys of the protocol's JSON that both the server and NimbusKit read or write, each
/// spelled once: neither side may write one of these as a string literal of its own
/// (`WireVocabularyTests` checks the sources), so the two cannot drift apart.
///
/// Keys only one side ever uses stay where they are used; a key that comes to be shared moves
/// here. Field types, comparators, system fields, error codes and limits have their own
/// types in this module (`FieldType`, `QueryComparator`, `SystemField`, `ServerErrorCode`,
/// `Limits`).
public enum WireKey {
    // MARK: Records and fields

    public static let recordName = "recordName"
    public static let recordType = "recordType"
    public static let recordChangeTag = "recordChangeTag"
    public static let fields = "fields"
    public static let value = "value"
    public static let type = "type"
    public static let parent = "parent"
    public static let records = "records"
    public static let desiredKeys = "desiredKeys"
    public static let created = "created"
    public static let modified = "modified"
    public static let deleted = "deleted"
    public static let pluginFields = "pluginFields"
    public static let timestamp = "timestamp"
    public static let deviceID = "deviceID"
    public static let userRecordName = "userRecordName"
    public static let ownerRecordName = "ownerRecordName"
    public static let action = "action"

    // MARK: Request bodies

    public static let operations = "operations"
    /// Nimbus: a modify request's idempotency key (docs/protocol.md, "operationID"; docs/sdk.md, "Operations").
    public static let operationID = "operationID"
    public static let operationType = "operationType"
    public static let record = "record"
    public static let zone = "zone"
    public static let numbersAsStrings = "numbersAsStrings"
    public static let desiredRecordTypes = "desiredRecordTypes"
    public static let subscription = "subscription"

    // MARK: Assets (reference §7)

    public static let tokens = "tokens"
    public static let url = "url"
    public static let size = "size"
    public static let assets = "assets"
    public static let singleFile = "singleFile"
    public static let fileChecksum = "fileChecksum"
    public static let receipt = "receipt"
    public static let referenceChecksum = "referenceChecksum"
    public static let wrappingKey = "wrappingKey"
    public static let downloadURL = "downloadURL"

    // MARK: Queries

    public static let filterBy = "filterBy"
    public static let sortBy = "sortBy"
    public static let comparator = "comparator"
    public static let fieldName = "fieldName"
    public static let systemFieldName = "systemFieldName"
    public static let fieldValue = "fieldValue"
    public static let distance = "distance"
    public static let ascending = "ascending"
    public static let relativeLocation = "relativeLocation"

    // MARK: Zones and change feeds

    public static let zoneID = "zoneID"
    public static let zoneName = "zoneName"
    public static let zoneType = "zoneType"
    public static let zones = "zones"
    public static let atomic = "atomic"
    public static let syncToken = "syncToken"
    /// The deprecated `zones/changes`' name for the database change feed's token.
    public static let metaSyncToken = "metaSyncToken"

    // MARK: A location's value

    public static let latitude = "latitude"
    public static let longitude = "longitude"
    public static let horizontalAccuracy = "horizontalAccuracy"
    public static let verticalAccuracy = "verticalAccuracy"
    public static let altitude = "altitude"
    public static let speed = "speed"
    public static let course = "course"
    public static let moreComing = "moreComing"
    public static let resultsLimit = "resultsLimit"
    public static let continuationMarker = "continuationMarker"
    public static let zoneWide = "zoneWide"
    public static let query = "query"

    // MARK: Errors (the error dictionary, `CloudKitError.json(uuid:)` and `init?(json:)`)

    public static let serverErrorCode = "serverErrorCode"
    public static let reason = "reason"
    public static let uuid = "uuid"
    public static let retryAfter = "retryAfter"
    public static let redirectURL = "redirectURL"
    public static let serverRecord = "serverRecord"
    public static let limit = "limit"

    // MARK: Credentials and sessions

    public static let ckAPIToken = "ckAPIToken"
    public static let ckWebAuthToken = "ckWebAuthToken"
    public static let ckDeviceID = "ckDeviceID"
    public static let username = "username"
    public static let password = "password"
    public static let idToken = "idToken"

    // MARK: Sharing (docs/sharing.md)

    public static let share = "share"
    public static let shortGUID = "shortGUID"
    public static let createShortGUID = "createShortGUID"
    public static let forRecord = "forRecord"
    public static let publicPermission = "publicPermission"
    public static let participants = "participants"
    public static let participantId = "participantId"
    public static let userIdentity = "userIdentity"
    public static let permission = "permission"
    public static let acceptanceStatus = "acceptanceStatus"
    public static let owner = "owner"
    public static let currentUserParticipant = "currentUserParticipant"
    public static let stableUrl = "stableUrl"
    public static let displayedHostname = "displayedHostname"
    public static let webpageURL = "webpageURL"

    // MARK: Users and push registration

    public static let users = "users"
    /// `users/caller`'s storage figures (a Nimbus addition): `quota` with `usedBytes` and
    /// `quotaBytes` of the caller's private database.
    public static let quota = "quota"
    public static let usedBytes = "usedBytes"
    public static let quotaBytes = "quotaBytes"
    public static let lookupInfo = "lookupInfo"
    public static let nameComponents = "nameComponents"
    public static let nickname = "nickname"
    public static let firstName = "firstName"
    public static let lastName = "lastName"
    public static let emailAddress = "emailAddress"
    public static let phoneNumber = "phoneNumber"
    public static let lookupInfos = "lookupInfos"
    public static let namePrefix = "namePrefix"
    public static let givenName = "givenName"
    public static let middleName = "middleName"
    public static let familyName = "familyName"
    public static let nameSuffix = "nameSuffix"
    public static let discoverable = "discoverable"
    public static let status = "status"
    public static let apnsEnvironment = "apnsEnvironment"
    public static let apnsToken = "apnsToken"
    public static let webcourierURL = "webcourierURL"

    // MARK: Subscriptions

    public static let subscriptionID = "subscriptionID"
    public static let subscriptionType = "subscriptionType"
    public static let subscriptions = "subscriptions"
    public static let firesOn = "firesOn"
    public static let firesOnce = "firesOnce"
    public static let notificationInfo = "notificationInfo"

    // MARK: Notifications, their payload and the stream

    public static let af = "af"
    public static let alert = "alert"
    public static let alertActionLocalizationKey = "alertActionLocalizationKey"
    public static let alertBody = "alertBody"
    public static let alertLaunchImage = "alertLaunchImage"
    public static let alertLocalizationArgs = "alertLocalizationArgs"
    public static let alertLocalizationKey = "alertLocalizationKey"
    public static let aps = "aps"
    public static let badge = "badge"
    public static let badgeValue = "badgeValue"
    public static let body = "body"
    public static let category = "category"
    public static let cid = "cid"
    public static let ck = "ck"
    public static let ckuserid = "ckuserid"
    public static let collapseIDKey = "collapseIDKey"
    public static let database = "database"
    public static let dbs = "dbs"
    public static let fet = "fet"
    public static let fo = "fo"
    public static let met = "met"
    public static let nid = "nid"
    public static let notification = "notification"
    public static let notificationID = "notificationID"
    public static let notificationIDs = "notificationIDs"
    public static let notifications = "notifications"
    public static let payload = "payload"
    public static let qry = "qry"
    public static let rdn = "rdn"
    public static let read = "read"
    public static let ready = "ready"
    public static let rid = "rid"
    public static let shouldBadge = "shouldBadge"
    public static let shouldSendContentAvailable = "shouldSendContentAvailable"
    public static let shouldSendMutableContent = "shouldSendMutableContent"
    public static let sid = "sid"
    public static let sound = "sound"
    public static let soundName = "soundName"
    public static let subtitle = "subtitle"
    public static let subtitleLocalizationArgs = "subtitleLocalizationArgs"
    public static let subtitleLocalizationKey = "subtitleLocalizationKey"
    public static let title = "title"
    public static let titleLocalizationArgs = "titleLocalizationArgs"
    public static let titleLocalizationKey = "titleLocalizationKey"
    public static let zid = "zid"
    public static let zoid = "zoid"

    // MARK: Test mode (docs/testing.md)

    /// A fault's kind in `/test/1/faults` (NimbusKit's journals say `kind` of their own).
    public static let kind = "kind"
}
