/// The PostgreSQL schema, as named migrations of literal SQL, one statement per string (the
/// extended protocol runs one statement at a time). Shipped migrations are frozen history:
/// change the schema by appending one. The function that applies a unit's writes is not a
/// migration's: nodes install it by its text's fingerprint (`PostgresApply`), so earlier
/// migrations that installed its versions were emptied of them (nothing calls those). `PostgresStorage.migrate` runs the missing ones in
/// order, each in its own transaction, holding an advisory lock so that nodes starting
/// together do not race.
///
/// Layout (docs/scale-out.md): every table of the logical databases (zones, records, index
/// entries, tokens, sorted pairs, references, subscriptions) carries `database_id`, the
/// distribution column, first in its primary and unique keys, as Citus requires of a
/// distributed table; what is read per user (notifications, push tokens, badges) is keyed by
/// `user_id`; accounts are small reference tables. Strings that are keys or sort
/// keys are `COLLATE "C"`, so their order is byte order, as on SQLite.
enum PostgresMigrations {
    static let all: [(name: String, statements: [String])] = [
        (
            "v1-accounts-and-push",
            [
                """
                CREATE TABLE meta (
                    key text COLLATE "C" PRIMARY KEY,
                    value bytea NOT NULL
                )
                """,
                """
                CREATE TABLE containers (
                    id text COLLATE "C" PRIMARY KEY,
                    created_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE api_tokens (
                    token_hash text COLLATE "C" PRIMARY KEY,
                    container text COLLATE "C" NOT NULL REFERENCES containers (id) ON DELETE CASCADE,
                    environment text NOT NULL,
                    created_at bigint NOT NULL,
                    revoked boolean NOT NULL DEFAULT false,
                    allowed_origins text NOT NULL DEFAULT '*'
                )
                """,
                "CREATE INDEX api_tokens_by_container ON api_tokens (container, environment)",
                """
                CREATE TABLE users (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    name text COLLATE "C" NOT NULL UNIQUE,
                    password_hash text NOT NULL,
                    created_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE sessions (
                    token_hash text COLLATE "C" PRIMARY KEY,
                    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    created_at bigint NOT NULL,
                    last_used_at bigint NOT NULL
                )
                """,
                "CREATE INDEX sessions_by_user ON sessions (user_id)",
                // Starting a session removes idle ones: without this, a scan of every session.
                "CREATE INDEX sessions_by_last_use ON sessions (last_used_at)",
                """
                CREATE TABLE push_tokens (
                    token text COLLATE "C" PRIMARY KEY,
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    user_id bigint NOT NULL,
                    apns_environment text NOT NULL,
                    web_courier boolean NOT NULL,
                    device_id text NOT NULL,
                    created_at bigint NOT NULL
                )
                """,
                "CREATE INDEX push_tokens_by_owner ON push_tokens (user_id, container, environment)",
                """
                CREATE TABLE apns_credentials (
                    container text COLLATE "C" PRIMARY KEY REFERENCES containers (id),
                    team_id text NOT NULL,
                    key_id text NOT NULL,
                    topic text NOT NULL,
                    private_key text NOT NULL,
                    updated_at bigint NOT NULL
                )
                """,
            ]
        ),
        (
            "v2-databases-records-notifications",
            [
                // Units of work choose the ids of new rows (UnitOfWorkDriver): blocks come from here.
                "CREATE TABLE id_blocks (kind text PRIMARY KEY, next_id bigint NOT NULL)",
                "INSERT INTO id_blocks (kind, next_id) VALUES ('database', 1), ('zone', 1), ('record', 1)",
                "CREATE TABLE counters (key text PRIMARY KEY, value bigint NOT NULL)",
                // index_rebuild_pending: as on SQLite, a new store asks once for production index
                // entries to be written (the service does it as it starts; on a new store, nothing).
                """
                INSERT INTO counters (key, value)
                VALUES ('subscriptions_version', 0), ('notifications_pruned_through', 0), ('index_rebuild_pending', 1)
                """,
                """
                CREATE TABLE databases (
                    id bigint PRIMARY KEY,
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    scope text NOT NULL,
                    owner_id bigint NOT NULL,
                    sequence bigint NOT NULL DEFAULT 0,
                    UNIQUE (container, environment, scope, owner_id)
                )
                """,
                """
                CREATE TABLE zones (
                    database_id bigint NOT NULL,
                    id bigint NOT NULL,
                    name text COLLATE "C" NOT NULL,
                    change_sequence bigint NOT NULL,
                    deleted boolean NOT NULL DEFAULT false,
                    PRIMARY KEY (database_id, id),
                    UNIQUE (database_id, name)
                )
                """,
                "CREATE INDEX zones_by_change ON zones (database_id, change_sequence)",
                // A zone's id is unique across databases (id blocks): statements that know only
                // the id find its database here (nimbus_zone_database).
                "CREATE INDEX zones_by_id ON zones (id)",
                """
                CREATE FUNCTION nimbus_zone_database(zone bigint) RETURNS bigint LANGUAGE sql STABLE AS $$
                    SELECT database_id FROM zones WHERE id = zone
                $$
                """,
                """
                CREATE TABLE records (
                    database_id bigint NOT NULL,
                    id bigint NOT NULL,
                    zone_id bigint NOT NULL,
                    record_name text COLLATE "C" NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    fields bytea NOT NULL,
                    parent text,
                    change_sequence bigint NOT NULL,
                    created_at bigint NOT NULL,
                    created_by text NOT NULL,
                    created_device text NOT NULL,
                    modified_at bigint NOT NULL,
                    modified_by text NOT NULL,
                    modified_device text NOT NULL,
                    deleted boolean NOT NULL DEFAULT false,
                    PRIMARY KEY (database_id, id),
                    UNIQUE (database_id, zone_id, record_name)
                )
                """,
                // Rebuilding an index pages through a type's records in id order, across databases.
                "CREATE INDEX records_by_id ON records (id)",
                "CREATE INDEX records_by_change ON records (zone_id, change_sequence)",
                "CREATE INDEX records_by_type ON records (zone_id, record_type, id) WHERE NOT deleted",
                // Index entries as the service computes them (RecordIndexer); `num` is numeric so
                // INT64 values and doubles compare by exact value, and `text` is the string's
                // UTF-8 bytes (bytea): it orders by bytes as SQLite's BINARY does, and holds the
                // U+0000 that PostgreSQL's text type refuses.
                """
                CREATE TABLE field_index (
                    database_id bigint NOT NULL,
                    record_id bigint NOT NULL,
                    field text COLLATE "C" NOT NULL,
                    position integer NOT NULL,
                    zone_id bigint NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    num numeric,
                    text bytea,
                    lon double precision,
                    PRIMARY KEY (database_id, record_id, field, position)
                )
                """,
                "CREATE INDEX field_index_by_number ON field_index (zone_id, record_type, field, num, record_id) WHERE num IS NOT NULL AND lon IS NULL",
                // Texts by their first 1,000 bytes (PostgresQuerySQL.indexedTextBytes): a btree key holds
                // at most about 2.7 kB.
                "CREATE INDEX field_index_by_text ON field_index (zone_id, record_type, field, substring(text from 1 for 1000), record_id) WHERE text IS NOT NULL",
                // Where a location is: NEAR reads this GiST index within a bounding box.
                "CREATE INDEX field_index_by_place ON field_index USING gist (point(lon, num::float8)) WHERE lon IS NOT NULL",
                // Search tokens, one tsvector a record (GIN): lexemes `field:token` and `token`.
                """
                CREATE TABLE record_tokens (
                    database_id bigint NOT NULL,
                    record_id bigint NOT NULL,
                    zone_id bigint NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    lexemes tsvector NOT NULL,
                    PRIMARY KEY (database_id, record_id)
                )
                """,
                "CREATE INDEX record_tokens_by_lexeme ON record_tokens USING gin (lexemes)",
                // The great-circle distance in meters: the haversine of Geodesy.greatCircleMeters.
                """
                CREATE FUNCTION nimbus_distance(lat1 float8, lon1 float8, lat2 float8, lon2 float8) RETURNS float8
                LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
                    SELECT 6371008.8 * 2 * atan2(sqrt(a), sqrt(1 - a))
                    FROM (SELECT sin(radians(lat2 - lat1) / 2) ^ 2
                                 + cos(radians(lat1)) * cos(radians(lat2)) * sin(radians(lon2 - lon1) / 2) ^ 2 AS a) h
                $$
                """,
                """
                CREATE TABLE pair_index (
                    database_id bigint NOT NULL,
                    record_id bigint NOT NULL,
                    field text COLLATE "C" NOT NULL,
                    sort_field text COLLATE "C" NOT NULL,
                    zone_id bigint NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    value_num numeric,
                    value_text bytea,
                    sort_num numeric,
                    sort_text bytea,
                    PRIMARY KEY (database_id, record_id, field, sort_field)
                )
                """,
                // One partial index per kind of value and of sort key, each in result order.
                "CREATE INDEX pair_index_text_by_text ON pair_index (zone_id, record_type, field, sort_field, substring(value_text from 1 for 1000), substring(sort_text from 1 for 1000), record_id) WHERE value_text IS NOT NULL AND sort_text IS NOT NULL",
                "CREATE INDEX pair_index_text_by_number ON pair_index (zone_id, record_type, field, sort_field, substring(value_text from 1 for 1000), sort_num, record_id) WHERE value_text IS NOT NULL AND sort_num IS NOT NULL",
                "CREATE INDEX pair_index_number_by_text ON pair_index (zone_id, record_type, field, sort_field, value_num, substring(sort_text from 1 for 1000), record_id) WHERE value_num IS NOT NULL AND sort_text IS NOT NULL",
                "CREATE INDEX pair_index_number_by_number ON pair_index (zone_id, record_type, field, sort_field, value_num, sort_num, record_id) WHERE value_num IS NOT NULL AND sort_num IS NOT NULL",
                """
                CREATE TABLE record_references (
                    database_id bigint NOT NULL,
                    source_zone_id bigint NOT NULL,
                    source_name text COLLATE "C" NOT NULL,
                    field_name text COLLATE "C" NOT NULL,
                    target_zone_id bigint NOT NULL,
                    target_name text COLLATE "C" NOT NULL,
                    action text NOT NULL
                )
                """,
                "CREATE INDEX references_by_source ON record_references (database_id, source_zone_id, source_name)",
                "CREATE INDEX references_by_target ON record_references (database_id, target_zone_id, target_name, action)",
                """
                CREATE TABLE schema_types (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    PRIMARY KEY (container, environment, record_type)
                )
                """,
                """
                CREATE TABLE schema_fields (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    field_name text COLLATE "C" NOT NULL,
                    field_type text NOT NULL,
                    indexes integer NOT NULL DEFAULT 7,
                    PRIMARY KEY (container, environment, record_type, field_name)
                )
                """,
                """
                CREATE TABLE subscriptions (
                    database_id bigint NOT NULL,
                    user_id bigint NOT NULL,
                    subscription_id text COLLATE "C" NOT NULL,
                    definition bytea NOT NULL,
                    created_at bigint NOT NULL,
                    PRIMARY KEY (database_id, user_id, subscription_id)
                )
                """,
                """
                CREATE TABLE subscription_changes (
                    version bigint PRIMARY KEY,
                    database_id bigint NOT NULL,
                    user_id bigint NOT NULL,
                    subscription_id text COLLATE "C" NOT NULL
                )
                """,
                """
                CREATE TABLE notifications (
                    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    user_id bigint NOT NULL,
                    notification_id text COLLATE "C" NOT NULL,
                    origin_device text NOT NULL,
                    payload bytea NOT NULL,
                    created_at bigint NOT NULL,
                    read boolean NOT NULL DEFAULT false,
                    collapse_id text,
                    silent boolean NOT NULL DEFAULT false
                )
                """,
                "CREATE INDEX notifications_by_owner ON notifications (user_id, container, environment, sequence)",
                "CREATE INDEX notifications_by_id ON notifications (user_id, container, environment, notification_id)",
                "CREATE INDEX notifications_by_age ON notifications (created_at)",
                """
                CREATE TABLE badges (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    user_id bigint NOT NULL,
                    value bigint NOT NULL,
                    PRIMARY KEY (user_id, container, environment)
                )
                """,
                """
                CREATE TABLE change_outbox (
                    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    database_id bigint NOT NULL,
                    body bytea NOT NULL,
                    created_at bigint NOT NULL
                )
                """,
            ]
        ),
        (
            "v3-server-keys",
            [
                // Server-to-server keys (docs/keys.md): a small reference table, like api_tokens.
                """
                CREATE TABLE server_keys (
                    key_id text COLLATE "C" PRIMARY KEY,
                    container text COLLATE "C" NOT NULL REFERENCES containers (id) ON DELETE CASCADE,
                    environment text NOT NULL,
                    public_key text NOT NULL,
                    created_at bigint NOT NULL,
                    revoked boolean NOT NULL DEFAULT false
                )
                """,
                "CREATE INDEX server_keys_by_container ON server_keys (container)",
                // Signatures seen while their date is still acceptable: a second use is a replay.
                """
                CREATE TABLE used_signatures (
                    signature_hash text COLLATE "C" PRIMARY KEY,
                    keep_until bigint NOT NULL
                )
                """,
                "CREATE INDEX used_signatures_by_expiry ON used_signatures (keep_until)",
            ]
        ),
        (
            "v4-people",
            [
                // Accounts that are people (docs/identities.md).
                "ALTER TABLE users ADD COLUMN email text COLLATE \"C\" UNIQUE",
                "ALTER TABLE users ADD COLUMN phone text COLLATE \"C\" UNIQUE",
                "ALTER TABLE users ADD COLUMN name_components text NOT NULL DEFAULT '{}'",
                // Who has used each container, their record name there, and whether they let
                // others discover them (NULL: never asked). Read per container: a reference table.
                """
                CREATE TABLE container_members (
                    container text COLLATE "C" NOT NULL,
                    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                    record_name text COLLATE "C" NOT NULL,
                    discoverable boolean,
                    joined_at bigint NOT NULL,
                    PRIMARY KEY (container, user_id),
                    UNIQUE (container, record_name)
                )
                """,
                """
                CREATE TABLE container_settings (
                    container text COLLATE "C" PRIMARY KEY REFERENCES containers (id) ON DELETE CASCADE,
                    user_discovery boolean NOT NULL DEFAULT true
                )
                """,
            ]
        ),
        (
            "v5-security-roles",
            [
                // Security roles of the public database (docs/roles.md): small reference tables.
                """
                CREATE TABLE security_roles (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    name text COLLATE "C" NOT NULL,
                    created_at bigint NOT NULL,
                    PRIMARY KEY (container, environment, name)
                )
                """,
                """
                CREATE TABLE security_grants (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    record_type text COLLATE "C" NOT NULL,
                    role text COLLATE "C" NOT NULL,
                    permissions integer NOT NULL,
                    PRIMARY KEY (container, environment, record_type, role)
                )
                """,
                """
                CREATE TABLE role_assignments (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                    role text COLLATE "C" NOT NULL,
                    PRIMARY KEY (container, environment, user_id, role)
                )
                """,
            ]
        ),
        (
            "v6-sign-up",
            [
                // Self-service sign-up per container (docs/identities.md), off unless turned on.
                "ALTER TABLE container_settings ADD COLUMN sign_up boolean NOT NULL DEFAULT false",
            ]
        ),
        (
            "v7-sign-in-callback",
            [
                // Where the sign-in page sends the browser after signing in (docs/identities.md).
                "ALTER TABLE api_tokens ADD COLUMN sign_in_callback text",
            ]
        ),
        (
            "v8-identity-providers",
            [
                // OpenID Connect issuers per container, and the accounts their subjects signed in
                // as (docs/identities.md).
                """
                CREATE TABLE identity_providers (
                    container text COLLATE "C" NOT NULL REFERENCES containers (id) ON DELETE CASCADE,
                    issuer text COLLATE "C" NOT NULL,
                    audience text NOT NULL,
                    jwks_source text NOT NULL,
                    created_at bigint NOT NULL,
                    PRIMARY KEY (container, issuer)
                )
                """,
                """
                CREATE TABLE external_identities (
                    issuer text COLLATE "C" NOT NULL,
                    subject text COLLATE "C" NOT NULL,
                    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                    PRIMARY KEY (issuer, subject)
                )
                """,
            ]
        ),
        (
            "v9-limits-and-usage",
            [
                // Per-container overrides of request budgets and quotas (docs/limits.md).
                "ALTER TABLE container_settings ADD COLUMN limits text NOT NULL DEFAULT '{}'",
                // The bytes each database's live records take (RecordRow.storedBytes).
                "ALTER TABLE databases ADD COLUMN used_bytes bigint NOT NULL DEFAULT 0",
                """
                UPDATE databases SET used_bytes = coalesce((
                    SELECT sum(octet_length(r.record_name) + octet_length(r.record_type) + octet_length(r.fields))
                    FROM records r WHERE r.database_id = databases.id AND NOT r.deleted), 0)
                """,
            ]
        ),
        (
            "v10-assets",
            [
                // Asset blobs (docs/assets.md): one per container and SHA-256.
                """
                CREATE TABLE asset_blobs (
                    container text COLLATE "C" NOT NULL,
                    checksum text COLLATE "C" NOT NULL,
                    size bigint NOT NULL,
                    blob_key text COLLATE "C" NOT NULL UNIQUE,
                    touched_at bigint NOT NULL,
                    PRIMARY KEY (container, checksum)
                )
                """,
                // Which record fields hold which blobs, written with the record (by database,
                // as every record table is).
                """
                CREATE TABLE asset_references (
                    database_id bigint NOT NULL,
                    source_zone_id bigint NOT NULL,
                    source_name text COLLATE "C" NOT NULL,
                    field_name text COLLATE "C" NOT NULL,
                    position integer NOT NULL,
                    container text COLLATE "C" NOT NULL,
                    checksum text COLLATE "C" NOT NULL,
                    size bigint NOT NULL,
                    PRIMARY KEY (database_id, source_zone_id, source_name, field_name, position)
                )
                """,
                "CREATE INDEX asset_references_by_blob ON asset_references (container, checksum)",
                "CREATE TABLE asset_upload_claims (id text COLLATE \"C\" PRIMARY KEY, expires_at bigint NOT NULL)",
            ]
        ),
        (
            "v11-shares",
            [
                // Which share each short GUID names (docs/sharing.md).
                """
                CREATE TABLE share_guids (
                    short_guid text COLLATE "C" PRIMARY KEY,
                    container text COLLATE "C" NOT NULL,
                    environment text COLLATE "C" NOT NULL,
                    owner_id bigint NOT NULL,
                    owner_record_name text COLLATE "C" NOT NULL,
                    zone_name text COLLATE "C" NOT NULL,
                    record_name text COLLATE "C" NOT NULL
                )
                """,
                // Which shares each user may take part in; the share records say whether they do.
                """
                CREATE TABLE share_members (
                    container text COLLATE "C" NOT NULL,
                    environment text COLLATE "C" NOT NULL,
                    member_record_name text COLLATE "C" NOT NULL,
                    owner_id bigint NOT NULL,
                    owner_record_name text COLLATE "C" NOT NULL,
                    zone_name text COLLATE "C" NOT NULL,
                    record_name text COLLATE "C" NOT NULL,
                    PRIMARY KEY (container, environment, member_record_name, owner_id, zone_name, record_name)
                )
                """,
            ]
        ),
        (
            "v12-operation-outcomes",
            [
                // A modify's answer by operation ID, kept a day (docs/protocol.md, "operationID"; docs/sdk.md, "Operations"); `response`
                // is NULL while the request that claimed it runs.
                """
                CREATE TABLE operation_outcomes (
                    container text COLLATE "C" NOT NULL,
                    environment text COLLATE "C" NOT NULL,
                    user_record_name text COLLATE "C" NOT NULL,
                    operation_id text COLLATE "C" NOT NULL,
                    request_hash text COLLATE "C" NOT NULL,
                    created_at bigint NOT NULL,
                    response bytea,
                    PRIMARY KEY (container, environment, user_record_name, operation_id)
                )
                """,
                "CREATE INDEX operation_outcomes_by_age ON operation_outcomes (created_at)",
            ]
        ),
        (
            "v13-operators",
            [
                // The dashboard's operators, their sessions and the audit log (docs/dashboard.md):
                // small tables, reference tables under Citus.
                """
                CREATE TABLE operators (
                    name text COLLATE "C" PRIMARY KEY,
                    password_hash text NOT NULL,
                    role text NOT NULL,
                    containers text,
                    created_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE operator_sessions (
                    token_hash text COLLATE "C" PRIMARY KEY,
                    operator_name text COLLATE "C" NOT NULL REFERENCES operators (name) ON DELETE CASCADE,
                    csrf_token text NOT NULL,
                    created_at bigint NOT NULL,
                    last_seen_at bigint NOT NULL,
                    expires_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE operator_audit (
                    id bigserial PRIMARY KEY,
                    at bigint NOT NULL,
                    operator_name text NOT NULL,
                    action text NOT NULL,
                    container text,
                    detail text NOT NULL
                )
                """,
            ]
        ),
        (
            "v14-operator-second-factor",
            [
                // An operator's optional TOTP second factor, and the last time step a code was
                // spent at (a code is good once).
                "ALTER TABLE operators ADD COLUMN totp_secret text, ADD COLUMN totp_pending text, ADD COLUMN totp_last_step bigint",
            ]
        ),
        (
            "v15-apply-schema-removals",
            [
                // Installed a version of the apply function, which nodes now install by its
                // fingerprint (PostgresApply): nothing left to run.
            ]
        ),
        (
            "v16-apply-set-based",
            [
                // Installed a version of the apply function, which nodes now install by its
                // fingerprint (PostgresApply): nothing left to run.
            ]
        ),
        (
            "v17-zone-record-sequences",
            [
                // Record sequences are ordered per zone (issue 35): a zone keeps its records'
                // last sequence apart from the database sequence its database's change feed
                // orders it by. They start equal, so change tokens handed out before keep
                // their meaning; the apply function checks zones instead of databases.
                "ALTER TABLE zones ADD COLUMN record_sequence bigint NOT NULL DEFAULT 0",
                "UPDATE zones SET record_sequence = change_sequence",
            ]
        ),
        (
            "v18-request-log",
            [
                // The lasting request log (PostgresRequestLog): every node writes here and
                // the dashboard reads here, so it is the same on every node.
                """
                CREATE TABLE request_log (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    at bigint NOT NULL,
                    node text NOT NULL,
                    uuid text NOT NULL,
                    method text NOT NULL,
                    route text NOT NULL,
                    container text,
                    environment text,
                    database text,
                    user_record_name text,
                    user_name text,
                    status integer NOT NULL,
                    error text,
                    item_errors text,
                    ms double precision NOT NULL
                )
                """,
                "CREATE INDEX request_log_by_time ON request_log (at)",
                "CREATE INDEX request_log_by_user_name ON request_log (user_name, id)",
                "CREATE INDEX request_log_by_user_record ON request_log (user_record_name, id)",
            ]
        ),
        (
            "v19-record-history",
            [
                // Time travel (RecordHistoryStore): a record's row as it was before each write
                // that replaced it, copied by a trigger, so the apply function's every path keeps
                // versions without knowing. Keeping is on while the settings row holds a time.
                """
                CREATE TABLE record_history (
                    database_id bigint NOT NULL,
                    zone_id bigint NOT NULL,
                    record_name text COLLATE "C" NOT NULL,
                    replaced_at bigint NOT NULL,
                    kept bigint GENERATED ALWAYS AS IDENTITY,
                    record_type text COLLATE "C" NOT NULL,
                    fields bytea NOT NULL,
                    parent text,
                    change_sequence bigint NOT NULL,
                    created_at bigint NOT NULL,
                    created_by text NOT NULL,
                    created_device text NOT NULL,
                    modified_at bigint NOT NULL,
                    modified_by text NOT NULL,
                    modified_device text NOT NULL,
                    deleted boolean NOT NULL
                )
                """,
                "CREATE INDEX record_history_by_zone ON record_history (database_id, zone_id, replaced_at)",
                "CREATE TABLE record_history_settings (id integer PRIMARY KEY CHECK (id = 1), kept_since bigint, days integer NOT NULL)",
                "INSERT INTO record_history_settings (id, kept_since, days) VALUES (1, NULL, 0)",
                """
                CREATE FUNCTION nimbus_keep_record_version() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF EXISTS (SELECT 1 FROM record_history_settings WHERE kept_since IS NOT NULL) THEN
                        INSERT INTO record_history (database_id, zone_id, record_name, replaced_at, record_type, fields, parent,
                            change_sequence, created_at, created_by, created_device, modified_at, modified_by, modified_device, deleted)
                        VALUES (OLD.database_id, OLD.zone_id, OLD.record_name, NEW.modified_at, OLD.record_type, OLD.fields, OLD.parent,
                            OLD.change_sequence, OLD.created_at, OLD.created_by, OLD.created_device, OLD.modified_at, OLD.modified_by,
                            OLD.modified_device, OLD.deleted);
                    END IF;
                    RETURN NULL;
                END
                $$
                """,
                "CREATE TRIGGER records_keep_versions AFTER UPDATE ON records FOR EACH ROW EXECUTE FUNCTION nimbus_keep_record_version()",
                // Blobs a record let go of while versions are kept: an earlier version may
                // still hold them, so the collector leaves them for the retention.
                """
                CREATE TABLE asset_history (
                    container text COLLATE "C" NOT NULL,
                    checksum text COLLATE "C" NOT NULL,
                    released_at bigint NOT NULL,
                    PRIMARY KEY (container, checksum)
                )
                """,
                """
                CREATE FUNCTION nimbus_keep_released_asset() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF EXISTS (SELECT 1 FROM record_history_settings WHERE kept_since IS NOT NULL) THEN
                        INSERT INTO asset_history (container, checksum, released_at)
                        VALUES (OLD.container, OLD.checksum, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                        ON CONFLICT (container, checksum) DO UPDATE SET released_at = excluded.released_at;
                    END IF;
                    RETURN NULL;
                END
                $$
                """,
                "CREATE TRIGGER asset_references_keep_versions AFTER DELETE ON asset_references FOR EACH ROW EXECUTE FUNCTION nimbus_keep_released_asset()",
            ]
        ),
        (
            "v20-request-minutes",
            [
                // Each node's per-minute request figures (PostgresRequestLog): the dashboard's
                // charts sum every node's rows.
                """
                CREATE TABLE request_minutes (
                    minute bigint NOT NULL,
                    node text NOT NULL,
                    container text NOT NULL,
                    requests integer NOT NULL,
                    server_errors integer NOT NULL,
                    errors text NOT NULL,
                    latency text NOT NULL
                )
                """,
                "CREATE INDEX request_minutes_by_minute ON request_minutes (minute)",
            ]
        ),
        (
            "v21-api-token-names",
            [
                // Tokens listed by name and last use, revoked one at a time (docs/dashboard.md).
                "ALTER TABLE api_tokens ADD COLUMN name text",
                "ALTER TABLE api_tokens ADD COLUMN last_used_at bigint",
            ]
        ),
        (
            "v22-operator-lifecycle",
            [
                // Operators disabled and enabled; one-time passwords that expire and must be changed.
                "ALTER TABLE operators ADD COLUMN disabled boolean NOT NULL DEFAULT false",
                "ALTER TABLE operators ADD COLUMN password_expires_at bigint",
            ]
        ),
        (
            "v23-user-disabled",
            [
                // App users disabled by an operator (docs/dashboard.md): no sign-in until enabled.
                "ALTER TABLE users ADD COLUMN disabled boolean NOT NULL DEFAULT false"
            ]
        ),
        (
            "v24-shared-budgets",
            [
                // Request budgets every node spends from together (PostgresSharedBudgets).
                """
                CREATE UNLOGGED TABLE request_budgets (
                    key text PRIMARY KEY,
                    tokens double precision NOT NULL,
                    capacity double precision NOT NULL,
                    updated_at bigint NOT NULL
                )
                """,
                "CREATE INDEX request_budgets_by_age ON request_budgets (updated_at)",
            ]
        ),
        (
            "v25-schema-refusals",
            [
                // Writes production refused for what its schema lacked (docs/schema.md).
                """
                CREATE TABLE schema_refusals (
                    container text NOT NULL,
                    environment text NOT NULL,
                    missing text NOT NULL,
                    count bigint NOT NULL,
                    last_at bigint NOT NULL,
                    PRIMARY KEY (container, environment, missing)
                )
                """,
            ]
        ),
        (
            "v26-sealed-keys",
            [
                // Keys a user's devices seal for each other, and zone keys of shares sealed with
                // the user's key (docs/encryption.md): nothing here opens without a device's key.
                """
                CREATE TABLE sealed_keys (
                    user_id bigint NOT NULL,
                    container text NOT NULL,
                    environment text NOT NULL,
                    kind text NOT NULL,
                    name text NOT NULL,
                    public_key text,
                    sealed text,
                    sealed_by text,
                    updated_at bigint NOT NULL,
                    PRIMARY KEY (user_id, container, environment, kind, name)
                )
                """
            ]
        ),
        (
            "v27-device-sync",
            [
                // What each device has been served, for the sync doctor (docs/sync-doctor.md).
                """
                CREATE TABLE device_sync (
                    user_id bigint NOT NULL,
                    container text NOT NULL,
                    environment text NOT NULL,
                    device_id text NOT NULL,
                    state text NOT NULL,
                    updated_at bigint NOT NULL,
                    PRIMARY KEY (user_id, container, environment, device_id)
                )
                """,
                "CREATE INDEX device_sync_updated ON device_sync (updated_at)",
            ]
        ),
        (
            "v28-partitions",
            [
                // The partitions a home store knows and where each logical database lives
                // (docs/scale-out.md, "Partitions: the design"); a database placed nowhere is
                // the home's. Only the home's copies are read.
                """
                CREATE TABLE partitions (
                    name text COLLATE "C" PRIMARY KEY,
                    url text NOT NULL,
                    added_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE placements (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    scope text NOT NULL,
                    owner_id bigint NOT NULL,
                    partition text COLLATE "C" NOT NULL,
                    PRIMARY KEY (container, environment, scope, owner_id)
                )
                """,
                "CREATE INDEX placements_partition ON placements (partition)",
            ]
        ),
        (
            "v29-partition-numbers",
            [
                // A partition's number fixes its id range (PartitionIDs: n × 2^48; the home is 0).
                "ALTER TABLE partitions ADD COLUMN number bigint GENERATED BY DEFAULT AS IDENTITY (START WITH 1) UNIQUE",
                // Which database of which cluster it is (system_identifier/database), so the same
                // one is never added twice under two URLs.
                "ALTER TABLE partitions ADD COLUMN identity text UNIQUE",
                // Its hot standbys, which answer its clients' reads as `--read-replica` does the home's.
                "ALTER TABLE partitions ADD COLUMN replicas text[] NOT NULL DEFAULT '{}'",
                // Which change-outbox entries other partitions forwarded to this one (the home),
                // by partition and the entry's sequence there: a forward repeated after a crash
                // adds nothing twice. Kept a day.
                """
                CREATE TABLE outbox_forwarded (
                    partition bigint NOT NULL,
                    sequence bigint NOT NULL,
                    forwarded_at bigint NOT NULL,
                    PRIMARY KEY (partition, sequence)
                )
                """,
                "CREATE INDEX outbox_forwarded_at ON outbox_forwarded (forwarded_at)",
            ]
        ),
        (
            "v30-partition-moves",
            [
                // A database being moved off this store names its target (the move's fence: its
                // writes are refused), and is marked moved once the placement switched: the row
                // stays as a pointer (docs/scale-out.md, "Moving a user").
                "ALTER TABLE databases ADD COLUMN moving_to text COLLATE \"C\", ADD COLUMN moved boolean NOT NULL DEFAULT false",
                // The home's record of each database's move under way, by its step, so a move
                // interrupted at any step goes on from there when run again.
                """
                CREATE TABLE moves (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    scope text NOT NULL,
                    owner_id bigint NOT NULL,
                    source text COLLATE "C" NOT NULL,
                    target text COLLATE "C" NOT NULL,
                    step text NOT NULL,
                    -- Where the source stood as the first copy started (PostgresStorage.CopyMark, JSON).
                    mark text,
                    started_at bigint NOT NULL,
                    stepped_at bigint NOT NULL,
                    PRIMARY KEY (container, environment, scope, owner_id)
                )
                """,
                // Moved on by every placement a move switches: nodes that cache placements
                // check it about every second and forget theirs when it moved.
                "INSERT INTO counters (key, value) VALUES ('placements_version', 0) ON CONFLICT (key) DO NOTHING",
            ]
        ),
        (
            "v31-database-directory",
            [
                // Which database id a key (container, environment, scope, owner) has: written once
                // as the database is made, read by nodes that do not know the id yet, which then
                // name the database by id in every statement (PostgresDatabaseIDs). On Citus a
                // reference table, so that lookup goes to no particular shard while `databases`
                // is distributed by id (docs/scale-out.md, "Citus routing").
                """
                CREATE TABLE database_directory (
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    scope text NOT NULL,
                    owner_id bigint NOT NULL,
                    database_id bigint NOT NULL,
                    PRIMARY KEY (container, environment, scope, owner_id)
                )
                """,
                "CREATE INDEX database_directory_by_id ON database_directory (database_id)",
                """
                INSERT INTO database_directory (container, environment, scope, owner_id, database_id)
                SELECT container, environment, scope, owner_id, id FROM databases
                """,
            ]
        ),
        (
            "v32-zone-database-plpgsql",
            [
                // The lookup a statement falls back on for a zone the node has not read
                // (PostgresZoneDatabases). As a SQL function PostgreSQL inlined it, but Citus
                // refuses SQL functions that take parameters and read a distributed table
                // ("could not create distributed plan", Citus 13.2); PL/pgSQL it accepts.
                """
                CREATE OR REPLACE FUNCTION nimbus_zone_database(zone bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
                BEGIN
                    RETURN (SELECT database_id FROM zones WHERE id = zone);
                END
                $$
                """,
            ]
        ),
        (
            "v33-zone-updates-in-place",
            [
                // Every write stamps its zone's row with the database's next change sequence.
                // Indexed, that column made each stamp a new version in all four of the zone's
                // indexes (no heap-only update), and a busy zone's row piled up dead entries that
                // every later write walked: a single create spent 0.23 of its 0.6 ms of apply
                // in the zone stamp and the database's sequence read beside it (issue 35,
                // forty-first session; 0.03 ms without the index). The database change feed
                // reads a database's zones by its key instead and sorts them: a database holds
                // few zones, and the feed is read far less often than zones are written.
                "DROP INDEX zones_by_change",
            ]
        ),
        (
            "v34-schema-version",
            [
                // Moved by every schema change the apply function makes: a unit decided over a
                // schema carried from its zone's last group (issue 35: a create with no load)
                // checks it is still the one read. A table of its own, not a row of `counters`:
                // every write takes the subscriptions version's row there FOR SHARE, and a plain
                // read of the same page beside it waited for the page's lock (two nodes' creates
                // into zones of their own: 941 against 1,266 a second without the read).
                "CREATE TABLE schema_version (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), version bigint NOT NULL)",
                "INSERT INTO schema_version (version) VALUES (0)",
            ]
        ),
        (
            "v35-no-hot-database-row",
            [
                // Writes no longer change their database's row (PostgresDatabaseFeed): they mark
                // the zones they change pending in its change feed, stamped after they commit,
                // and count their bytes on a zone row. Neither column is indexed, so a write's
                // zone update stays heap-only (v33).
                "ALTER TABLE zones ADD COLUMN feed_pending boolean NOT NULL DEFAULT false",
                "ALTER TABLE zones ADD COLUMN used_bytes bigint NOT NULL DEFAULT 0",
            ]
        ),
        (
            "v36-records-by-key-only",
            [
                // A record's id alone was indexed for statements that found a record without
                // naming its database. Every statement names `database_id` now (for Citus,
                // checked by scripts/statement-routes.py), so the primary key (database_id, id)
                // serves each of them, and this index only cost every record written a fifth
                // b-tree entry: one of the eleven a record with two queryable fields wrote
                // (issue 35, forty-ninth session).
                "DROP INDEX IF EXISTS records_by_id",
            ]
        ),
        (
            "v37-entry-keys",
            [
                // Entries name their record type and field by one 64-bit key
                // (`PostgresEntryKey`), sorted pairs by two, instead of the names as text: every
                // entry index led with the names, and comparing them was about a quarter of a
                // batch's time in PostgreSQL (issue 35). Altered in place rather than copied into
                // new tables, so a Citus deployment keeps its distribution. Not for a rolling
                // upgrade: nodes of earlier versions write the dropped columns.
                PostgresEntryKey.function,
                "DROP INDEX field_index_by_number",
                "DROP INDEX field_index_by_text",
                "ALTER TABLE field_index ADD COLUMN entry_key bigint",
                "UPDATE field_index SET entry_key = nimbus_entry_key(record_type, field)",
                "ALTER TABLE field_index ALTER COLUMN entry_key SET NOT NULL",
                "ALTER TABLE field_index DROP CONSTRAINT field_index_pkey",
                "ALTER TABLE field_index ADD PRIMARY KEY (database_id, record_id, entry_key, position)",
                "ALTER TABLE field_index DROP COLUMN field, DROP COLUMN record_type",
                "CREATE INDEX field_index_by_number ON field_index (zone_id, entry_key, num, record_id) WHERE num IS NOT NULL AND lon IS NULL",
                "CREATE INDEX field_index_by_text ON field_index (zone_id, entry_key, substring(text from 1 for 1000), record_id) WHERE text IS NOT NULL",
                "DROP INDEX pair_index_text_by_text",
                "DROP INDEX pair_index_text_by_number",
                "DROP INDEX pair_index_number_by_text",
                "DROP INDEX pair_index_number_by_number",
                "ALTER TABLE pair_index ADD COLUMN field_key bigint, ADD COLUMN sort_key bigint",
                "UPDATE pair_index SET field_key = nimbus_entry_key(record_type, field), sort_key = nimbus_entry_key(record_type, sort_field)",
                "ALTER TABLE pair_index ALTER COLUMN field_key SET NOT NULL, ALTER COLUMN sort_key SET NOT NULL",
                "ALTER TABLE pair_index DROP CONSTRAINT pair_index_pkey",
                "ALTER TABLE pair_index ADD PRIMARY KEY (database_id, record_id, field_key, sort_key)",
                "ALTER TABLE pair_index DROP COLUMN field, DROP COLUMN sort_field, DROP COLUMN record_type",
                "CREATE INDEX pair_index_text_by_text ON pair_index (zone_id, field_key, sort_key, substring(value_text from 1 for 1000), substring(sort_text from 1 for 1000), record_id) WHERE value_text IS NOT NULL AND sort_text IS NOT NULL",
                "CREATE INDEX pair_index_text_by_number ON pair_index (zone_id, field_key, sort_key, substring(value_text from 1 for 1000), sort_num, record_id) WHERE value_text IS NOT NULL AND sort_num IS NOT NULL",
                "CREATE INDEX pair_index_number_by_text ON pair_index (zone_id, field_key, sort_key, value_num, substring(sort_text from 1 for 1000), record_id) WHERE value_num IS NOT NULL AND sort_text IS NOT NULL",
                "CREATE INDEX pair_index_number_by_number ON pair_index (zone_id, field_key, sort_key, value_num, sort_num, record_id) WHERE value_num IS NOT NULL AND sort_num IS NOT NULL",
            ]
        ),
    ]
}
