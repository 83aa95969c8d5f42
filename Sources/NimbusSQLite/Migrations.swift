import GRDB

/// The SQLite schema, as named migrations of literal SQL. Shipped migrations are frozen
/// history: change the schema by appending a new one.
enum Migrations {
    static func register(in migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v1-core") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta (
                        key TEXT PRIMARY KEY,
                        value BLOB NOT NULL
                    );
                    INSERT INTO meta (key, value) VALUES ('installation_secret', randomblob(32));

                    CREATE TABLE containers (
                        id TEXT PRIMARY KEY,
                        created_at INTEGER NOT NULL
                    );

                    CREATE TABLE api_tokens (
                        token_hash TEXT PRIMARY KEY,
                        container TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        revoked INTEGER NOT NULL DEFAULT 0
                    );

                    CREATE TABLE users (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        name TEXT NOT NULL UNIQUE,
                        password_hash TEXT NOT NULL,
                        created_at INTEGER NOT NULL
                    );

                    CREATE TABLE sessions (
                        token_hash TEXT PRIMARY KEY,
                        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        last_used_at INTEGER NOT NULL
                    );
                    CREATE INDEX sessions_by_user ON sessions(user_id);

                    -- AUTOINCREMENT: ids are never reused, so a token naming an old database
                    -- or zone can never match a new one.
                    CREATE TABLE databases (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        scope TEXT NOT NULL,
                        owner_id INTEGER NOT NULL,
                        sequence INTEGER NOT NULL DEFAULT 0,
                        UNIQUE (container, environment, scope, owner_id)
                    );

                    CREATE TABLE zones (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        database_id INTEGER NOT NULL REFERENCES databases(id),
                        name TEXT NOT NULL,
                        change_sequence INTEGER NOT NULL,
                        deleted INTEGER NOT NULL DEFAULT 0,
                        UNIQUE (database_id, name)
                    );
                    CREATE INDEX zones_by_change ON zones(database_id, change_sequence);

                    CREATE TABLE records (
                        zone_id INTEGER NOT NULL REFERENCES zones(id),
                        record_name TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        fields BLOB NOT NULL,
                        parent TEXT,
                        change_sequence INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        created_by TEXT NOT NULL,
                        created_device TEXT NOT NULL,
                        modified_at INTEGER NOT NULL,
                        modified_by TEXT NOT NULL,
                        modified_device TEXT NOT NULL,
                        deleted INTEGER NOT NULL DEFAULT 0,
                        UNIQUE (zone_id, record_name)
                    );
                    CREATE INDEX records_by_change ON records(zone_id, change_sequence);

                    CREATE TABLE schema_types (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        PRIMARY KEY (container, environment, record_type)
                    ) WITHOUT ROWID;

                    CREATE TABLE schema_fields (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        field_name TEXT NOT NULL,
                        field_type TEXT NOT NULL,
                        PRIMARY KEY (container, environment, record_type, field_name)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v2-references") { db in
            try db.execute(
                sql: """
                    CREATE TABLE record_references (
                        source_zone_id INTEGER NOT NULL,
                        source_name TEXT NOT NULL,
                        field_name TEXT NOT NULL,
                        target_zone_id INTEGER NOT NULL,
                        target_name TEXT NOT NULL,
                        action TEXT NOT NULL
                    );
                    CREATE INDEX references_by_source ON record_references(source_zone_id, source_name);
                    CREATE INDEX references_by_target ON record_references(target_zone_id, target_name, action);
                    """)
        }
        migrator.registerMigration("v3-query-indexes") { db in
            try db.execute(
                sql: """
                    -- Keyed by the record's rowid (an integer: cheaper to compare and store than
                    -- its name), WITHOUT ROWID: the key serves "this record's entries", and each
                    -- entry goes into one more B-tree only (by number, by location or by text).
                    CREATE TABLE field_index (
                        record_id INTEGER NOT NULL,
                        field TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        zone_id INTEGER NOT NULL,
                        record_type TEXT NOT NULL,
                        num REAL,
                        text TEXT,
                        lon REAL,
                        PRIMARY KEY (record_id, field, position)
                    ) WITHOUT ROWID;
                    -- Numbers in value order, ties by record: walking it serves ORDER BY.
                    CREATE INDEX field_index_by_number ON field_index(zone_id, record_type, field, num, record_id)
                        WHERE num IS NOT NULL AND lon IS NULL;
                    -- Locations: latitude then longitude, so NEAR's bands need no table visits.
                    CREATE INDEX field_index_by_location ON field_index(zone_id, record_type, field, num, lon)
                        WHERE lon IS NOT NULL;
                    CREATE INDEX field_index_by_text ON field_index(zone_id, record_type, field, text, record_id)
                        WHERE text IS NOT NULL;

                    CREATE TABLE token_index (
                        record_id INTEGER NOT NULL,
                        field TEXT NOT NULL,
                        token TEXT NOT NULL,
                        zone_id INTEGER NOT NULL,
                        record_type TEXT NOT NULL,
                        PRIMARY KEY (record_id, field, token)
                    ) WITHOUT ROWID;
                    CREATE INDEX token_index_by_token ON token_index(zone_id, record_type, token, field, record_id);

                    -- Live records of a type in rowid order (the query tie-break).
                    CREATE INDEX records_by_type ON records(zone_id, record_type) WHERE deleted = 0;

                    ALTER TABLE schema_fields ADD COLUMN indexes INTEGER NOT NULL DEFAULT 7;
                    """)
        }
        migrator.registerMigration("v4-subscriptions") { db in
            try db.execute(
                sql: """
                    CREATE TABLE subscriptions (
                        database_id INTEGER NOT NULL REFERENCES databases(id),
                        user_id INTEGER NOT NULL,
                        subscription_id TEXT NOT NULL,
                        definition BLOB NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (database_id, user_id, subscription_id)
                    ) WITHOUT ROWID;

                    -- The notification collection: one sequence for the installation (never
                    -- reused), read per user in sequence order.
                    CREATE TABLE notifications (
                        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        user_id INTEGER NOT NULL,
                        notification_id TEXT NOT NULL,
                        origin_device TEXT NOT NULL,
                        payload BLOB NOT NULL,
                        created_at INTEGER NOT NULL,
                        read INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX notifications_by_owner ON notifications(container, environment, user_id, sequence);
                    CREATE INDEX notifications_by_id ON notifications(container, environment, user_id, notification_id);
                    CREATE INDEX notifications_by_age ON notifications(created_at);
                    INSERT INTO meta (key, value) VALUES ('notifications_pruned_through', 0);

                    CREATE TABLE push_tokens (
                        token TEXT PRIMARY KEY,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        user_id INTEGER NOT NULL,
                        apns_environment TEXT NOT NULL,
                        web_courier INTEGER NOT NULL,
                        created_at INTEGER NOT NULL
                    );
                    CREATE INDEX push_tokens_by_owner ON push_tokens(container, environment, user_id);

                    CREATE TABLE badges (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        user_id INTEGER NOT NULL,
                        value INTEGER NOT NULL,
                        PRIMARY KEY (container, environment, user_id)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v5-apns") { db in
            try db.execute(
                sql: """
                    -- Tokens registered before device IDs were kept go to every device.
                    ALTER TABLE push_tokens ADD COLUMN device_id TEXT NOT NULL DEFAULT 'iCloud';

                    CREATE TABLE apns_credentials (
                        container TEXT PRIMARY KEY REFERENCES containers(id),
                        team_id TEXT NOT NULL,
                        key_id TEXT NOT NULL,
                        topic TEXT NOT NULL,
                        private_key TEXT NOT NULL,
                        updated_at INTEGER NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v6-sorted-pairs") { db in
            try db.execute(
                sql: """
                    -- One entry per record and (equality field, sort field) pair the production
                    -- schema grants (IndexGrants.sortedPairs): "field = ? ORDER BY
                    -- sort_field" reads one range of the index below in result order. `value` and
                    -- `sort_value` have no declared type, so numbers stay numbers and texts texts.
                    CREATE TABLE pair_index (
                        record_id INTEGER NOT NULL,
                        field TEXT NOT NULL,
                        sort_field TEXT NOT NULL,
                        zone_id INTEGER NOT NULL,
                        record_type TEXT NOT NULL,
                        value NOT NULL,
                        sort_value NOT NULL,
                        PRIMARY KEY (record_id, field, sort_field)
                    ) WITHOUT ROWID;
                    CREATE INDEX pair_index_by_value
                        ON pair_index(zone_id, record_type, field, sort_field, value, sort_value, record_id);
                    -- Production records saved before this have no pair entries yet: the
                    -- service rebuilds their index entries once, when it starts.
                    INSERT INTO meta (key, value) VALUES ('index_rebuild_pending', 1);
                    """)
        }
        migrator.registerMigration("v7-token-origins") { db in
            try db.execute(
                sql: """
                    -- The web origins allowed to use a token, one per line; '*' is any origin
                    -- (what every token made before this allowed).
                    ALTER TABLE api_tokens ADD COLUMN allowed_origins TEXT NOT NULL DEFAULT '*';
                    """)
        }
        migrator.registerMigration("v8-exact-integers") { db in
            try db.execute(
                sql: """
                    -- `num` loses its REAL type: a REAL column turns every INT64 into a double,
                    -- so values past 2^53 compared equal to their neighbours. Untyped, integers
                    -- stay integers, doubles stay doubles, and SQLite orders the two together by
                    -- exact value.
                    CREATE TABLE field_index_v8 (
                        record_id INTEGER NOT NULL,
                        field TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        zone_id INTEGER NOT NULL,
                        record_type TEXT NOT NULL,
                        num,
                        text TEXT,
                        lon REAL,
                        PRIMARY KEY (record_id, field, position)
                    ) WITHOUT ROWID;
                    INSERT INTO field_index_v8 (record_id, field, position, zone_id, record_type, num, text, lon)
                        SELECT record_id, field, position, zone_id, record_type, num, text, lon FROM field_index;
                    DROP TABLE field_index;
                    ALTER TABLE field_index_v8 RENAME TO field_index;
                    CREATE INDEX field_index_by_number ON field_index(zone_id, record_type, field, num, record_id)
                        WHERE num IS NOT NULL AND lon IS NULL;
                    CREATE INDEX field_index_by_location ON field_index(zone_id, record_type, field, num, lon)
                        WHERE lon IS NOT NULL;
                    CREATE INDEX field_index_by_text ON field_index(zone_id, record_type, field, text, record_id)
                        WHERE text IS NOT NULL;
                    -- The copied numbers are the rounded doubles: every record's entries (both
                    -- environments) are written again from its fields when the service starts.
                    INSERT INTO meta (key, value) VALUES ('index_rebuild_pending', 1)
                        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
                    """)
        }
        migrator.registerMigration("v9-change-outbox") { db in
            try db.execute(
                sql: """
                    -- Changes to watched databases, written in the changing transaction and
                    -- removed in the transaction that stores their notifications: a crash
                    -- between the two leaves them here to be matched after the restart.
                    -- AUTOINCREMENT: the one writer hands out sequences in commit order.
                    CREATE TABLE change_outbox (
                        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                        database_id INTEGER NOT NULL,
                        body BLOB NOT NULL,
                        created_at INTEGER NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v10-shared-delivery") { db in
            try db.execute(
                sql: """
                    -- Every node pushes the notifications any node stored: how to push them is
                    -- stored with them.
                    ALTER TABLE notifications ADD COLUMN collapse_id TEXT;
                    ALTER TABLE notifications ADD COLUMN silent INTEGER NOT NULL DEFAULT 0;
                    -- Bumped by every subscription saved or deleted, so every node's index follows.
                    INSERT INTO meta (key, value) VALUES ('subscriptions_version', 0);
                    """)
        }
        migrator.registerMigration("v11-subscription-changes") { db in
            try db.execute(
                sql: """
                    -- Which subscription each subscriptions_version changed, so a node catches up
                    -- on a few changes without compiling every subscription again. The newest
                    -- entries are kept (SQLiteTransaction.subscriptionChangesKept).
                    CREATE TABLE subscription_changes (
                        version INTEGER PRIMARY KEY,
                        database_id INTEGER NOT NULL,
                        user_id INTEGER NOT NULL,
                        subscription_id TEXT NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v12-server-keys") { db in
            try db.execute(
                sql: """
                    -- Server-to-server keys (docs/keys.md): the public half, by its id.
                    CREATE TABLE server_keys (
                        key_id TEXT PRIMARY KEY,
                        container TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL,
                        public_key TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        revoked INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX server_keys_by_container ON server_keys(container);
                    -- Signatures seen while their date is still acceptable: a second use is a replay.
                    CREATE TABLE used_signatures (
                        signature_hash TEXT PRIMARY KEY,
                        keep_until INTEGER NOT NULL
                    );
                    CREATE INDEX used_signatures_by_expiry ON used_signatures(keep_until);
                    """)
        }
        migrator.registerMigration("v13-people") { db in
            try db.execute(
                sql: """
                    -- Accounts that are people (docs/identities.md): how others look them up, and
                    -- their name (NameComponents as JSON).
                    ALTER TABLE users ADD COLUMN email TEXT;
                    ALTER TABLE users ADD COLUMN phone TEXT;
                    ALTER TABLE users ADD COLUMN name_components TEXT NOT NULL DEFAULT '{}';
                    CREATE UNIQUE INDEX users_by_email ON users(email);
                    CREATE UNIQUE INDEX users_by_phone ON users(phone);
                    -- Who has used each container, their record name there (so a record name
                    -- finds its user) and whether they let others discover them (NULL: never asked).
                    CREATE TABLE container_members (
                        container TEXT NOT NULL,
                        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        record_name TEXT NOT NULL,
                        discoverable INTEGER,
                        joined_at INTEGER NOT NULL,
                        PRIMARY KEY (container, user_id)
                    );
                    CREATE UNIQUE INDEX container_members_by_record_name ON container_members(container, record_name);
                    -- A container's settings; a container without a row has the defaults.
                    CREATE TABLE container_settings (
                        container TEXT PRIMARY KEY REFERENCES containers(id) ON DELETE CASCADE,
                        user_discovery INTEGER NOT NULL DEFAULT 1
                    );
                    """)
        }
        migrator.registerMigration("v14-security-roles") { db in
            try db.execute(
                sql: """
                    -- Security roles of the public database (docs/roles.md), per container environment.
                    CREATE TABLE security_roles (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        name TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (container, environment, name)
                    );
                    -- A record type with rows here has exactly these grants; without, the defaults.
                    CREATE TABLE security_grants (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        role TEXT NOT NULL,
                        permissions INTEGER NOT NULL,
                        PRIMARY KEY (container, environment, record_type, role)
                    );
                    CREATE TABLE role_assignments (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        role TEXT NOT NULL,
                        PRIMARY KEY (container, environment, user_id, role)
                    );
                    """)
        }
        migrator.registerMigration("v15-sign-up") { db in
            try db.execute(
                sql: """
                    -- Self-service sign-up per container (docs/identities.md), off unless turned on.
                    ALTER TABLE container_settings ADD COLUMN sign_up INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        migrator.registerMigration("v16-sign-in-callback") { db in
            try db.execute(
                sql: """
                    -- Where the sign-in page sends the browser after signing in (docs/identities.md).
                    ALTER TABLE api_tokens ADD COLUMN sign_in_callback TEXT;
                    """)
        }
        migrator.registerMigration("v17-identity-providers") { db in
            try db.execute(
                sql: """
                    -- OpenID Connect issuers per container, and the accounts their subjects signed
                    -- in as (docs/identities.md).
                    CREATE TABLE identity_providers (
                        container TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        issuer TEXT NOT NULL,
                        audience TEXT NOT NULL,
                        jwks_source TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (container, issuer)
                    );
                    CREATE TABLE external_identities (
                        issuer TEXT NOT NULL,
                        subject TEXT NOT NULL,
                        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        PRIMARY KEY (issuer, subject)
                    );
                    """)
        }
        migrator.registerMigration("v18-limits-and-usage") { db in
            try db.execute(
                sql: """
                    -- Per-container overrides of request budgets and quotas, a JSON object of
                    -- numbers by name (docs/limits.md).
                    ALTER TABLE container_settings ADD COLUMN limits TEXT NOT NULL DEFAULT '{}';
                    -- The bytes each database's live records take (RecordRow.storedBytes).
                    ALTER TABLE databases ADD COLUMN used_bytes INTEGER NOT NULL DEFAULT 0;
                    UPDATE databases SET used_bytes = (
                        SELECT coalesce(sum(length(CAST(r.record_name AS BLOB)) + length(CAST(r.record_type AS BLOB)) + length(r.fields)), 0)
                        FROM records r JOIN zones z ON z.id = r.zone_id
                        WHERE z.database_id = databases.id AND r.deleted = 0);
                    """)
        }
        migrator.registerMigration("v19-assets") { db in
            try db.execute(
                sql: """
                    -- Asset blobs (docs/assets.md): one per container and SHA-256, its bytes under
                    -- blob_key in the blob store.
                    CREATE TABLE asset_blobs (
                        container TEXT NOT NULL,
                        checksum TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        blob_key TEXT NOT NULL UNIQUE,
                        touched_at INTEGER NOT NULL,
                        PRIMARY KEY (container, checksum)
                    );
                    -- Which record fields hold which blobs, written with the record.
                    CREATE TABLE asset_references (
                        source_zone_id INTEGER NOT NULL,
                        source_name TEXT NOT NULL,
                        field_name TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        container TEXT NOT NULL,
                        checksum TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        PRIMARY KEY (source_zone_id, source_name, field_name, position)
                    );
                    CREATE INDEX asset_references_by_blob ON asset_references (container, checksum);
                    -- Upload URLs used, so none is used twice; kept until they expire.
                    CREATE TABLE asset_upload_claims (
                        id TEXT PRIMARY KEY,
                        expires_at INTEGER NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v20-shares") { db in
            try db.execute(
                sql: """
                    -- Which share each short GUID names (docs/sharing.md).
                    CREATE TABLE share_guids (
                        short_guid TEXT PRIMARY KEY,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        owner_id INTEGER NOT NULL,
                        owner_record_name TEXT NOT NULL,
                        zone_name TEXT NOT NULL,
                        record_name TEXT NOT NULL
                    );
                    -- Which shares each user may take part in; the share records say whether they do.
                    CREATE TABLE share_members (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        member_record_name TEXT NOT NULL,
                        owner_id INTEGER NOT NULL,
                        owner_record_name TEXT NOT NULL,
                        zone_name TEXT NOT NULL,
                        record_name TEXT NOT NULL,
                        PRIMARY KEY (container, environment, member_record_name, owner_id, zone_name, record_name)
                    );
                    """)
        }
        migrator.registerMigration("v21-operation-outcomes") { db in
            // A modify's answer by operation ID, kept a day (docs/protocol.md, "operationID"; docs/sdk.md, "Operations"); `response` is
            // NULL while the request that claimed it runs.
            try db.execute(
                sql: """
                    CREATE TABLE operation_outcomes (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        user_record_name TEXT NOT NULL,
                        operation_id TEXT NOT NULL,
                        request_hash TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        response BLOB,
                        PRIMARY KEY (container, environment, user_record_name, operation_id)
                    );
                    CREATE INDEX operation_outcomes_by_age ON operation_outcomes (created_at);
                    """)
        }
        migrator.registerMigration("v22-operators") { db in
            // The dashboard's operators, their sessions and the audit log (docs/dashboard.md).
            try db.execute(
                sql: """
                    CREATE TABLE operators (
                        name TEXT PRIMARY KEY,
                        password_hash TEXT NOT NULL,
                        role TEXT NOT NULL,
                        containers TEXT,
                        created_at INTEGER NOT NULL
                    );
                    CREATE TABLE operator_sessions (
                        token_hash TEXT PRIMARY KEY,
                        operator_name TEXT NOT NULL REFERENCES operators (name) ON DELETE CASCADE,
                        csrf_token TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        last_seen_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL
                    );
                    CREATE TABLE operator_audit (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at INTEGER NOT NULL,
                        operator_name TEXT NOT NULL,
                        action TEXT NOT NULL,
                        container TEXT,
                        detail TEXT NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v23-operator-second-factor") { db in
            // An operator's optional TOTP second factor, and the last time step a code was
            // spent at (a code is good once).
            try db.execute(
                sql: """
                    ALTER TABLE operators ADD COLUMN totp_secret TEXT;
                    ALTER TABLE operators ADD COLUMN totp_pending TEXT;
                    ALTER TABLE operators ADD COLUMN totp_last_step INTEGER;
                    """)
        }
        migrator.registerMigration("v24-zone-record-sequences") { db in
            // Record sequences are ordered per zone (issue 35): a zone keeps its records' last
            // sequence apart from the database sequence its database's change feed orders it
            // by. They start equal, so change tokens handed out before keep their meaning.
            try db.execute(
                sql: """
                    ALTER TABLE zones ADD COLUMN record_sequence INTEGER NOT NULL DEFAULT 0;
                    UPDATE zones SET record_sequence = change_sequence;
                    """)
        }
        migrator.registerMigration("v25-record-history") { db in
            // Time travel (RecordHistoryStore): a record's row as it was before each write
            // that replaced it, copied by the engine itself, so every write path keeps
            // versions without knowing. Keeping is on while the settings row holds a time.
            let keeping = "(SELECT kept_since FROM record_history_settings WHERE id = 1) IS NOT NULL"
            try db.execute(
                sql: """
                    CREATE TABLE record_history (
                        zone_id INTEGER NOT NULL,
                        record_name TEXT NOT NULL,
                        replaced_at INTEGER NOT NULL,
                        record_type TEXT NOT NULL,
                        fields BLOB NOT NULL,
                        parent TEXT,
                        change_sequence INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        created_by TEXT NOT NULL,
                        created_device TEXT NOT NULL,
                        modified_at INTEGER NOT NULL,
                        modified_by TEXT NOT NULL,
                        modified_device TEXT NOT NULL,
                        deleted INTEGER NOT NULL
                    );
                    CREATE INDEX record_history_by_zone ON record_history (zone_id, replaced_at);
                    CREATE TABLE record_history_settings (
                        id INTEGER PRIMARY KEY CHECK (id = 1), kept_since INTEGER, days INTEGER NOT NULL);
                    INSERT INTO record_history_settings (id, kept_since, days) VALUES (1, NULL, 0);
                    CREATE TRIGGER records_keep_versions AFTER UPDATE ON records WHEN \(keeping)
                    BEGIN
                        INSERT INTO record_history (zone_id, record_name, replaced_at, record_type, fields, parent, change_sequence,
                            created_at, created_by, created_device, modified_at, modified_by, modified_device, deleted)
                        VALUES (OLD.zone_id, OLD.record_name, NEW.modified_at, OLD.record_type, OLD.fields, OLD.parent,
                            OLD.change_sequence, OLD.created_at, OLD.created_by, OLD.created_device, OLD.modified_at,
                            OLD.modified_by, OLD.modified_device, OLD.deleted);
                    END;
                    -- Blobs a record let go of while versions are kept: an earlier version may
                    -- still hold them, so the collector leaves them for the retention.
                    CREATE TABLE asset_history (
                        container TEXT NOT NULL,
                        checksum TEXT NOT NULL,
                        released_at INTEGER NOT NULL,
                        PRIMARY KEY (container, checksum)
                    ) WITHOUT ROWID;
                    CREATE TRIGGER asset_references_keep_versions AFTER DELETE ON asset_references WHEN \(keeping)
                    BEGIN
                        INSERT OR REPLACE INTO asset_history (container, checksum, released_at)
                        VALUES (OLD.container, OLD.checksum, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
                    END;
                    """)
        }
        migrator.registerMigration("v26-api-token-names") { db in
            // Tokens listed by name and last use, revoked one at a time (docs/dashboard.md).
            try db.execute(
                sql: """
                    ALTER TABLE api_tokens ADD COLUMN name TEXT;
                    ALTER TABLE api_tokens ADD COLUMN last_used_at INTEGER;
                    """)
        }
        migrator.registerMigration("v27-operator-lifecycle") { db in
            // Operators disabled and enabled; one-time passwords that expire and must be changed.
            try db.execute(
                sql: """
                    ALTER TABLE operators ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE operators ADD COLUMN password_expires_at INTEGER;
                    """)
        }
        migrator.registerMigration("v28-user-disabled") { db in
            // App users disabled by an operator (docs/dashboard.md): no sign-in until enabled.
            try db.execute(sql: "ALTER TABLE users ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v29-schema-refusals") { db in
            // Writes production refused for what its schema lacked (docs/schema.md).
            try db.execute(
                sql: """
                    CREATE TABLE schema_refusals (
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        missing TEXT NOT NULL,
                        count INTEGER NOT NULL,
                        last_at INTEGER NOT NULL,
                        PRIMARY KEY (container, environment, missing)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v30-sealed-keys") { db in
            // Keys a user's devices seal for each other, and zone keys of shares sealed with
            // the user's key (docs/encryption.md): nothing here opens without a device's key.
            try db.execute(
                sql: """
                    CREATE TABLE sealed_keys (
                        user_id INTEGER NOT NULL,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        name TEXT NOT NULL,
                        public_key TEXT,
                        sealed TEXT,
                        sealed_by TEXT,
                        updated_at INTEGER NOT NULL,
                        PRIMARY KEY (user_id, container, environment, kind, name)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v31-device-sync") { db in
            // What each device has been served, for the sync doctor (docs/sync-doctor.md): one
            // row per device, kept while the device is seen (deviceSyncRetention).
            try db.execute(
                sql: """
                    CREATE TABLE device_sync (
                        user_id INTEGER NOT NULL,
                        container TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        state TEXT NOT NULL,
                        updated_at INTEGER NOT NULL,
                        PRIMARY KEY (user_id, container, environment, device_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX device_sync_updated ON device_sync (updated_at);
                    """)
        }
        migrator.registerMigration("v32-schema-generation") { db in
            // A value every change to the schema's rows replaces with a random one, in the
            // changing statement's own transaction (so a rollback puts the old one back with the
            // old rows): two transactions that read the same value read the same schema, and
            // `SchemaCache` keeps what it read by that value. Random rather than counted, so a
            // value a rolled-back change had made is never made again for other rows.
            var sql = "INSERT INTO meta (key, value) VALUES ('schema_generation', random());\n"
            for table in ["schema_types", "schema_fields"] {
                for event in ["INSERT", "UPDATE", "DELETE"] {
                    sql += """
                        CREATE TRIGGER \(table)_\(event.lowercased())_generation AFTER \(event) ON \(table)
                        BEGIN UPDATE meta SET value = random() WHERE key = 'schema_generation'; END;

                        """
                }
            }
            try db.execute(sql: sql)
        }
        migrator.registerMigration("v33-outbox-forwarded") { db in
            // Which change-outbox entries other partitions forwarded to this one (the home), by
            // partition and the entry's sequence there: a forward repeated after a crash adds
            // nothing twice (docs/scale-out.md, "Partitions: the design"). Kept a day.
            try db.execute(
                sql: """
                    CREATE TABLE outbox_forwarded (
                        partition INTEGER NOT NULL,
                        sequence INTEGER NOT NULL,
                        forwarded_at INTEGER NOT NULL,
                        PRIMARY KEY (partition, sequence)
                    ) WITHOUT ROWID;
                    CREATE INDEX outbox_forwarded_at ON outbox_forwarded (forwarded_at);
                    """)
        }
        migrator.registerMigration("v34-entry-keys") { db in
            // A field's entries name it by an integer (`entry_keys`, `EntryKeys`) instead of the
            // record type and field name spelled out in every entry and every index key: the
            // indexes in query order compared both strings at every step of every insert and
            // seek, and held them on every page. A 200-record batch's entries went in about
            // 1.16x faster in SQLite alone, and the file was 14% smaller (docs/benchmarks.md,
            // "Entries keyed by integer"). `sort_field` is empty for a field's own key and names
            // the sort field for a sorted pair's. Keys are only ever added: an id, once
            // committed, means the same name for the file's life, so every process may keep it.
            // The entries are carried over as they are; token entries keep their names.
            try db.execute(
                sql: """
                    CREATE TABLE entry_keys (
                        id INTEGER PRIMARY KEY,
                        record_type TEXT NOT NULL,
                        field TEXT NOT NULL,
                        sort_field TEXT NOT NULL,
                        UNIQUE (record_type, field, sort_field)
                    );
                    INSERT INTO entry_keys (record_type, field, sort_field)
                        SELECT DISTINCT record_type, field, '' FROM field_index;
                    INSERT INTO entry_keys (record_type, field, sort_field)
                        SELECT DISTINCT record_type, field, sort_field FROM pair_index;

                    CREATE TABLE field_index_v34 (
                        record_id INTEGER NOT NULL,
                        field_key INTEGER NOT NULL,
                        position INTEGER NOT NULL,
                        zone_id INTEGER NOT NULL,
                        num,
                        text TEXT,
                        lon REAL,
                        PRIMARY KEY (record_id, field_key, position)
                    ) WITHOUT ROWID;
                    INSERT INTO field_index_v34 (record_id, field_key, position, zone_id, num, text, lon)
                        SELECT f.record_id, k.id, f.position, f.zone_id, f.num, f.text, f.lon
                        FROM field_index f JOIN entry_keys k ON k.record_type = f.record_type AND k.field = f.field AND k.sort_field = '';
                    DROP TABLE field_index;
                    ALTER TABLE field_index_v34 RENAME TO field_index;
                    CREATE INDEX field_index_by_number ON field_index(zone_id, field_key, num, record_id)
                        WHERE num IS NOT NULL AND lon IS NULL;
                    CREATE INDEX field_index_by_location ON field_index(zone_id, field_key, num, lon)
                        WHERE lon IS NOT NULL;
                    CREATE INDEX field_index_by_text ON field_index(zone_id, field_key, text, record_id)
                        WHERE text IS NOT NULL;

                    CREATE TABLE pair_index_v34 (
                        record_id INTEGER NOT NULL,
                        pair_key INTEGER NOT NULL,
                        zone_id INTEGER NOT NULL,
                        value NOT NULL,
                        sort_value NOT NULL,
                        PRIMARY KEY (record_id, pair_key)
                    ) WITHOUT ROWID;
                    INSERT INTO pair_index_v34 (record_id, pair_key, zone_id, value, sort_value)
                        SELECT p.record_id, k.id, p.zone_id, p.value, p.sort_value
                        FROM pair_index p JOIN entry_keys k ON k.record_type = p.record_type AND k.field = p.field AND k.sort_field = p.sort_field;
                    DROP TABLE pair_index;
                    ALTER TABLE pair_index_v34 RENAME TO pair_index;
                    CREATE INDEX pair_index_by_value ON pair_index(zone_id, pair_key, value, sort_value, record_id);
                    """)
        }
    }
}
