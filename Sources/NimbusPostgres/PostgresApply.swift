import Foundation
import NIOCore
import NimbusStorage
import NimbusWire
import PostgresNIO

/// A unit of work's writes on PostgreSQL, all in this file: the JSON the driver sends
/// (`PostgresCoarseStorage.json(_:)`), with its record saves and index entries beside it as
/// typed arrays (`PostgresApply.Rows`), and the PL/pgSQL function that applies them
/// (`PostgresApply.body`) in one statement, one round trip and one transaction. A new kind of
/// write is a case in `PostgresCoarseStorage.single(_:)` and a `WHEN` branch in `body`; no
/// other file of this module changes (docs/architecture.md, "Adding a storage write").
///
/// The function is not installed by a migration: its name carries its text's fingerprint
/// (`nimbus_apply_` and 16 hex digits), and a node that starts and finds no function of that
/// name creates it (`PostgresStorage.migrate`). Editing the text here is the whole change.
/// During a rolling upgrade, nodes of the old and the new version each call their own.
/// Tables and columns still come by migration (PostgresMigrations). Versions left behind by
/// an upgrade cost nothing and may be dropped once no node runs them.
enum PostgresApply {
    /// The installed function's name for this text.
    static let name = "nimbus_apply_" + fingerprint(arguments + body)

    /// The unit's one database (NULL when its writes touch none, or several), then its
    /// changes. The database is the function's distribution argument on Citus
    /// (docs/scale-out.md, "Citus routing"); the body names each write's own database.
    /// After them, the unit's record saves and index entries (`Rows`), a typed array a column,
    /// bound in this order by `Rows.bind(into:)`. Named apart from every table's columns, which
    /// PL/pgSQL would otherwise find ambiguous.
    static let arguments = """
        (unit_database bigint, changes jsonb,
            rec_id bigint[], rec_zone bigint[], rec_database bigint[], rec_name text[], rec_type text[], rec_fields bytea[],
            rec_parent text[], rec_sequence bigint[], rec_created_at bigint[], rec_created_by text[], rec_created_device text[],
            rec_modified_at bigint[], rec_modified_by text[], rec_modified_device text[], rec_deleted boolean[],
            ent_record bigint[], ent_zone bigint[], ent_database bigint[], ent_key bigint[],
            ent_position integer[], ent_num text[], ent_text bytea[], ent_lon double precision[],
            tok_record bigint[], tok_zone bigint[], tok_database bigint[], tok_type text[], tok_field text[], tok_token text[],
            pair_record bigint[], pair_zone bigint[], pair_database bigint[], pair_field_key bigint[],
            pair_sort_key bigint[], pair_value_num text[], pair_value_text bytea[], pair_sort_num text[], pair_sort_text bytea[])
        """

    /// The call the driver sends, with `AS several_databases` after it for a group that
    /// writes several databases: the unit's database, its JSON, then each of `Rows`' columns.
    static let call =
        "SELECT \(name)($1::bigint, $2::jsonb, "
        + (3..<(3 + Rows.columnCount)).map { "$\($0)" }.joined(separator: ", ") + ")"

    /// The statement that installs it.
    static var definition: String {
        "CREATE OR REPLACE FUNCTION \(name)\(arguments) RETURNS void LANGUAGE plpgsql AS $nimbus$\n\(body)\n$nimbus$"
    }

    /// A stable fingerprint of the text (64-bit FNV-1a in hex): the same on every node and
    /// every run, unlike Swift's seeded `Hasher`.
    static func fingerprint(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// `changes` is `PostgresCoarseStorage.json(_:)`'s object. The function checks what the
    /// unit decided from, then applies its writes in the unit's order:
    /// - **Zones** (`zones`, in id order): each zone whose records the unit changed, or that
    ///   it deleted, must still have the record sequence the unit read and not be deleted; the
    ///   same statement moves it on and locks the row, so writers of different zones never
    ///   fail one another (issue 35: order only where CloudKit orders). A database whose zone
    ///   list the unit read for a write (`databasesRead`) must still be as read; so must the
    ///   subscriptions version and every badge the unit read. Anything else raises SQLSTATE
    ///   40001, which the driver reports as `StorageError.serializationFailure` and
    ///   `RetryingStorage` answers by running the unit again.
    /// - **Writes** (`writes`), one `WHEN` branch a kind. A run of record saves comes as one
    ///   `putRecords` and one `replaceIndexes`, one statement per table (PL/pgSQL spent about
    ///   0.35 ms a record saving one by one, most of it starting statements), their rows a
    ///   range (`[first, last]`, from 1) of the typed arrays after `changes`; a record
    ///   replaced meanwhile (another id under its name) fails the unit. A zone is made only
    ///   over the tombstone the unit saw (`replacing`), with the record sequence its records
    ///   left it at. Every statement finds zones by id and databases by key: none scans a table.
    /// - **Databases** last (`databases`, in id order: every one the unit writes in): each
    ///   refuses the unit if a move between partitions fenced it since the unit read it (its
    ///   row held FOR KEY SHARE to the commit), marks the zones the unit changed pending in its
    ///   change feed (`PostgresDatabaseFeed`: stamped after the commit), and adds the unit's
    ///   bytes to a zone row the unit holds, refusing growth the quota no longer allows. No
    ///   writer changes the database's row, so writers of its different zones never wait for
    ///   one another.
    /// - Notifications take a transaction advisory lock before their sequence, so a later
    ///   sequence never becomes visible before an earlier one; outbox entries and notifications
    ///   wake every node at commit (`NOTIFY nimbus`, PostgresSignals).
    static let body = #"""
        DECLARE
            w jsonb;
            current_value bigint;
            new_version bigint;
            affected bigint;
            outbox_appended boolean := false;
            notifications_stored boolean := false;
            -- The logical database of the zone a write names: every statement on a table of a
            -- logical database names it, as a Citus coordinator routes by. The driver sends it
            -- beside the zone; for a zone it has not read, the zone's row says
            -- (nimbus_zone_database), or else the unit's one database.
            db bigint;
            ids bigint[];  -- records of one database whose index entries a run of saves replaces (zones to stamp, at the end)
            used bigint;  -- a database's bytes before the unit's
            lo integer;  -- a run's first and last rows in the typed arrays
            hi integer;
        BEGIN
            -- Zones in id order (the unit sends them sorted): two units never wait for each
            -- other in a circle.
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'zones') LOOP
                db := coalesce((w->>'database')::bigint, nimbus_zone_database((w->>'id')::bigint), unit_database);
                -- The same update marks the zone pending in its database's change feed and adds
                -- the unit's bytes there (`stamp`, `bytes`: PostgresDatabaseFeed), one row version.
                UPDATE zones SET record_sequence = (w->>'final')::bigint,
                    feed_pending = feed_pending OR coalesce((w->>'stamp')::boolean, false),
                    used_bytes = used_bytes + coalesce((w->>'bytes')::bigint, 0)
                WHERE database_id = db AND id = (w->>'id')::bigint AND record_sequence = (w->>'read')::bigint AND NOT deleted;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'zone % changed since the unit read it', w->>'id' USING ERRCODE = '40001';
                END IF;
            END LOOP;
            -- Zones the unit decided over as an earlier group left them, without changing them:
            -- still so (a plain read; the answer it gives rests on them).
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'zonesRead') LOOP
                db := coalesce((w->>'database')::bigint, nimbus_zone_database((w->>'id')::bigint), unit_database);
                PERFORM 1 FROM zones
                WHERE database_id = db AND id = (w->>'id')::bigint AND record_sequence = (w->>'read')::bigint AND NOT deleted;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'zone % changed since the rows the unit was decided over', w->>'id' USING ERRCODE = '40001';
                END IF;
            END LOOP;
            -- The row FOR UPDATE waits for every writer of the database (each holds it FOR KEY
            -- SHARE to its commit, below); then no zone may have been stamped since the read,
            -- nor be waiting for its stamp but those the unit writes itself (and checks above).
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'databasesRead') LOOP
                SELECT sequence INTO current_value FROM databases WHERE id = (w->>'id')::bigint FOR UPDATE;
                IF current_value IS DISTINCT FROM (w->>'read')::bigint OR EXISTS (
                    SELECT 1 FROM zones WHERE database_id = (w->>'id')::bigint AND feed_pending AND NOT deleted
                      AND id NOT IN (SELECT (z->>'id')::bigint FROM jsonb_array_elements(changes->'zones') z))
                THEN
                    RAISE EXCEPTION 'database % changed since the unit read its zones', w->>'id' USING ERRCODE = '40001';
                END IF;
            END LOOP;
            IF changes ? 'subscriptionsVersion' THEN
                -- Shared by the writes that only read it (whether anyone watched their database):
                -- they do not queue behind one another for the cluster-wide row; only a unit that
                -- changes subscriptions waits for them, and they for it.
                IF (changes->'subscriptionsVersion'->>'changes')::bigint > 0 THEN
                    SELECT value INTO current_value FROM counters WHERE key = 'subscriptions_version' FOR UPDATE;
                ELSE
                    SELECT value INTO current_value FROM counters WHERE key = 'subscriptions_version' FOR SHARE;
                END IF;
                IF current_value <> (changes->'subscriptionsVersion'->>'read')::bigint THEN
                    RAISE EXCEPTION 'subscriptions changed since the unit read them' USING ERRCODE = '40001';
                END IF;
            END IF;
            -- A schema carried from the zone's last group (not loaded for this unit) must still
            -- be the current one; a plain read, as the schema is when loaded.
            IF changes ? 'schemaVersion' THEN
                SELECT version INTO current_value FROM schema_version;
                IF current_value IS DISTINCT FROM (changes->>'schemaVersion')::bigint THEN
                    RAISE EXCEPTION 'the schema changed since the unit read it' USING ERRCODE = '40001';
                END IF;
            END IF;
            -- Saves refused for quota over a database row kept from an earlier group: the
            -- refusal stands only if the usage now still leaves no room (a plain read).
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'quotaRefused') LOOP
                SELECT \#(PostgresDatabaseFeed.usedBytes) INTO current_value FROM databases WHERE id = (w->>'id')::bigint;
                IF coalesce(current_value, 0) + (w->>'bytes')::bigint <= (w->>'quota')::bigint THEN
                    RAISE EXCEPTION 'database % has room now for a save refused over kept rows', w->>'id' USING ERRCODE = '40001';
                END IF;
            END LOOP;
            -- Records a create took to be absent without loading them, and did not save (a
            -- saved one is checked by its save): none may exist, not even as a tombstone.
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'absent') LOOP
                db := coalesce((w->>'database')::bigint, nimbus_zone_database((w->>'zone')::bigint), unit_database);
                IF EXISTS (SELECT 1 FROM records WHERE database_id = db AND zone_id = (w->>'zone')::bigint
                    AND record_name = ANY(ARRAY(SELECT jsonb_array_elements_text(w->'names'))))
                THEN
                    RAISE EXCEPTION 'a record the unit took to be absent exists' USING ERRCODE = '40001';
                END IF;
            END LOOP;
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'badgesRead') LOOP
                SELECT value INTO current_value FROM badges
                WHERE user_id = (w->>'user')::bigint AND container = w->>'container' AND environment = w->>'environment'
                FOR UPDATE;
                IF coalesce(current_value, 0) <> (w->>'value')::bigint THEN
                    RAISE EXCEPTION 'a badge changed since the unit read it' USING ERRCODE = '40001';
                END IF;
            END LOOP;

            FOR w IN SELECT * FROM jsonb_array_elements(changes->'writes') LOOP
                CASE w->>'kind'
                WHEN 'takeIndexRebuildRequest' THEN
                    DELETE FROM counters WHERE key = 'index_rebuild_pending';
                WHEN 'createDatabase' THEN
                    -- The directory holds the key: a database made meanwhile holds it already (on
                    -- Citus, `databases` is distributed by id and can keep no unique key of its own).
                    INSERT INTO database_directory (container, environment, scope, owner_id, database_id)
                    VALUES (w->>'container', w->>'environment', w->>'scope', (w->>'owner')::bigint, (w->>'id')::bigint)
                    ON CONFLICT (container, environment, scope, owner_id) DO NOTHING;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'the database was made meanwhile' USING ERRCODE = '40001';
                    END IF;
                    INSERT INTO databases (id, container, environment, scope, owner_id, sequence)
                    VALUES ((w->>'id')::bigint, w->>'container', w->>'environment', w->>'scope', (w->>'owner')::bigint, 0);
                    INSERT INTO zones (id, database_id, name, change_sequence, record_sequence, deleted)
                    VALUES ((w->>'zone')::bigint, (w->>'id')::bigint, '_defaultZone', 0,
                        coalesce((w->>'recordSequence')::bigint, 0), false);
                WHEN 'createZone' THEN
                    -- Only over the tombstone the unit saw (or none): a zone made, or made and
                    -- deleted, meanwhile leaves a row of that name and fails the unit. The bytes
                    -- the tombstone still counts go to the database's own row.
                    WITH gone AS (
                        DELETE FROM zones WHERE database_id = (w->>'database')::bigint AND name = w->>'name' AND deleted
                          AND id = (w->>'replacing')::bigint
                        RETURNING used_bytes)
                    UPDATE databases SET used_bytes = databases.used_bytes + gone.used_bytes
                    FROM gone WHERE id = (w->>'database')::bigint AND gone.used_bytes <> 0;
                    INSERT INTO zones (id, database_id, name, change_sequence, record_sequence, deleted, feed_pending)
                    VALUES ((w->>'id')::bigint, (w->>'database')::bigint, w->>'name', 0, (w->>'recordSequence')::bigint, false, true)
                    ON CONFLICT (database_id, name) DO NOTHING;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'zone % was made or deleted meanwhile', w->>'name' USING ERRCODE = '40001';
                    END IF;
                WHEN 'deleteZone' THEN
                    db := coalesce((w->>'database')::bigint, nimbus_zone_database((w->>'id')::bigint), unit_database);
                    UPDATE zones SET used_bytes = used_bytes - (
                        SELECT coalesce(sum(octet_length(record_name) + octet_length(record_type) + octet_length(fields)), 0)
                        FROM records WHERE database_id = db AND zone_id = (w->>'id')::bigint AND NOT deleted)
                      - (SELECT coalesce(sum(size), 0) FROM asset_references
                         WHERE database_id = db AND source_zone_id = (w->>'id')::bigint)
                    WHERE database_id = db AND id = (w->>'id')::bigint;
                    DELETE FROM asset_references WHERE database_id = db AND source_zone_id = (w->>'id')::bigint;
                    DELETE FROM field_index WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM record_tokens WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM pair_index WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM records WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM record_references WHERE database_id = db AND source_zone_id = (w->>'id')::bigint;
                    UPDATE zones SET deleted = true WHERE database_id = db AND id = (w->>'id')::bigint;
                WHEN 'putRecords' THEN
                    lo := (w->'rows'->>0)::integer;
                    hi := (w->'rows'->>1)::integer;
                    INSERT INTO records (database_id, id, zone_id, record_name, record_type, fields, parent, change_sequence,
                        created_at, created_by, created_device, modified_at, modified_by, modified_device, deleted)
                    SELECT coalesce(r.database, nimbus_zone_database(r.zone)), r.id, r.zone, r.name, r.type, r.fields, r.parent,
                        r.sequence, r.created_at, r.created_by, r.created_device, r.modified_at, r.modified_by, r.modified_device,
                        r.deleted
                    -- The columns unnested in the select list, side by side (NULL past a shorter
                    -- one's end, as a many-argument unnest in FROM): there PostgreSQL makes each row
                    -- as it inserts it, where a function in FROM first copies every row into a
                    -- tuplestore and reads it back (a third of a plain insert's time, measured).
                    FROM (SELECT unnest(rec_id[lo:hi]) AS id, unnest(rec_zone[lo:hi]) AS zone,
                        unnest(rec_database[lo:hi]) AS database, unnest(rec_name[lo:hi]) AS name, unnest(rec_type[lo:hi]) AS type,
                        unnest(rec_fields[lo:hi]) AS fields, unnest(rec_parent[lo:hi]) AS parent,
                        unnest(rec_sequence[lo:hi]) AS sequence, unnest(rec_created_at[lo:hi]) AS created_at,
                        unnest(rec_created_by[lo:hi]) AS created_by, unnest(rec_created_device[lo:hi]) AS created_device,
                        unnest(rec_modified_at[lo:hi]) AS modified_at, unnest(rec_modified_by[lo:hi]) AS modified_by,
                        unnest(rec_modified_device[lo:hi]) AS modified_device, unnest(rec_deleted[lo:hi]) AS deleted) AS r
                    WHERE true
                    ON CONFLICT (database_id, zone_id, record_name) DO UPDATE SET
                        record_type = excluded.record_type, fields = excluded.fields, parent = excluded.parent,
                        change_sequence = excluded.change_sequence, created_at = excluded.created_at,
                        created_by = excluded.created_by, created_device = excluded.created_device,
                        modified_at = excluded.modified_at, modified_by = excluded.modified_by,
                        modified_device = excluded.modified_device, deleted = excluded.deleted
                    WHERE records.id = excluded.id;
                    GET DIAGNOSTICS affected = ROW_COUNT;
                    IF affected <> hi - lo + 1 THEN
                        RAISE EXCEPTION 'a record was replaced meanwhile' USING ERRCODE = '40001';
                    END IF;
                WHEN 'replaceIndexes' THEN
                    -- By database and id array, which the primary keys serve whatever the
                    -- plan (a join with the JSON's rows let a cached plan scan whole tables).
                    FOR db, ids IN
                        SELECT coalesce(h.database, nimbus_zone_database(h.zone)), array_agg(h.record)
                        FROM jsonb_to_recordset(w->'had') AS h(record bigint, zone bigint, database bigint)
                        GROUP BY 1
                    LOOP
                        DELETE FROM field_index WHERE database_id = db AND record_id = ANY(ids);
                        DELETE FROM record_tokens WHERE database_id = db AND record_id = ANY(ids);
                        DELETE FROM pair_index WHERE database_id = db AND record_id = ANY(ids);
                    END LOOP;
                    lo := (w->'entries'->>0)::integer;
                    hi := (w->'entries'->>1)::integer;
                    INSERT INTO field_index (database_id, record_id, entry_key, position, zone_id, num, text, lon)
                    SELECT coalesce(e.database, nimbus_zone_database(e.zone)), e.record, e.key, e.position, e.zone,
                        e.num::numeric, e.bytes, e.lon
                    FROM (SELECT unnest(ent_record[lo:hi]) AS record, unnest(ent_zone[lo:hi]) AS zone,
                        unnest(ent_database[lo:hi]) AS database, unnest(ent_key[lo:hi]) AS key,
                        unnest(ent_position[lo:hi]) AS position, unnest(ent_num[lo:hi]) AS num, unnest(ent_text[lo:hi]) AS bytes,
                        unnest(ent_lon[lo:hi]) AS lon) AS e;
                    lo := (w->'tokens'->>0)::integer;
                    hi := (w->'tokens'->>1)::integer;
                    INSERT INTO record_tokens (database_id, record_id, zone_id, record_type, lexemes)
                    SELECT coalesce(t.database, nimbus_zone_database(t.zone)), t.record, t.zone, t.type,
                        array_to_tsvector(array_agg(DISTINCT l.lexeme))
                    FROM (SELECT unnest(tok_record[lo:hi]) AS record, unnest(tok_zone[lo:hi]) AS zone,
                        unnest(tok_database[lo:hi]) AS database, unnest(tok_type[lo:hi]) AS type, unnest(tok_field[lo:hi]) AS field,
                        unnest(tok_token[lo:hi]) AS token) AS t
                    CROSS JOIN LATERAL (VALUES (t.token), (t.field || ':' || t.token)) AS l(lexeme)
                    GROUP BY 1, t.record, t.zone, t.type;
                    lo := (w->'pairs'->>0)::integer;
                    hi := (w->'pairs'->>1)::integer;
                    INSERT INTO pair_index (database_id, record_id, field_key, sort_key, zone_id, value_num, value_text,
                        sort_num, sort_text)
                    SELECT coalesce(p.database, nimbus_zone_database(p.zone)), p.record, p.field_key, p.sort_key, p.zone,
                        p.value_num::numeric, p.value_text, p.sort_num::numeric, p.sort_text
                    FROM (SELECT unnest(pair_record[lo:hi]) AS record, unnest(pair_zone[lo:hi]) AS zone,
                        unnest(pair_database[lo:hi]) AS database, unnest(pair_field_key[lo:hi]) AS field_key,
                        unnest(pair_sort_key[lo:hi]) AS sort_key, unnest(pair_value_num[lo:hi]) AS value_num,
                        unnest(pair_value_text[lo:hi]) AS value_text, unnest(pair_sort_num[lo:hi]) AS sort_num,
                        unnest(pair_sort_text[lo:hi]) AS sort_text) AS p;
                WHEN 'replaceReferences' THEN
                    db := coalesce((w->>'database')::bigint, nimbus_zone_database((w->>'zone')::bigint), unit_database);
                    DELETE FROM record_references
                    WHERE database_id = db AND source_zone_id = (w->>'zone')::bigint AND source_name = w->>'name';
                    INSERT INTO record_references (database_id, source_zone_id, source_name, field_name, target_zone_id, target_name, action)
                    SELECT db, (w->>'zone')::bigint, w->>'name', r.field, r.target_zone, r.target_name, r.action
                    FROM jsonb_to_recordset(w->'rows') AS r(field text, target_zone bigint, target_name text, action text);
                WHEN 'replaceAssetReferences' THEN
                    db := coalesce((w->>'database')::bigint, nimbus_zone_database((w->>'zone')::bigint), unit_database);
                    DELETE FROM asset_references
                    WHERE database_id = db AND source_zone_id = (w->>'zone')::bigint AND source_name = w->>'name';
                    INSERT INTO asset_references (database_id, source_zone_id, source_name, field_name, position, container, checksum, size)
                    SELECT db, (w->>'zone')::bigint, w->>'name', a.field, a.position, w->>'container', a.checksum, a.size
                    FROM jsonb_to_recordset(w->'rows') AS a(field text, position integer, checksum text, size bigint);
                -- Every schema change moves the schema version (checked by units that carried
                -- the schema from their zone's last group).
                WHEN 'addSchemaField' THEN
                    INSERT INTO schema_fields (container, environment, record_type, field_name, field_type, indexes)
                    VALUES (w->>'container', w->>'environment', w->>'type', w->>'field', w->>'fieldType', (w->>'indexes')::integer)
                    ON CONFLICT DO NOTHING;
                    IF FOUND THEN UPDATE schema_version SET version = version + 1; END IF;
                WHEN 'setSchemaFieldIndexes' THEN
                    UPDATE schema_fields SET indexes = (w->>'indexes')::integer
                    WHERE container = w->>'container' AND environment = w->>'environment' AND record_type = w->>'type'
                      AND field_name = w->>'field';
                    UPDATE schema_version SET version = version + 1;
                WHEN 'removeFromSchema' THEN
                    DELETE FROM schema_fields
                    WHERE container = w->>'container' AND environment = w->>'environment' AND record_type = w->>'type'
                      AND (w->>'field' IS NULL OR field_name = w->>'field');
                    IF w->>'field' IS NULL THEN
                        DELETE FROM schema_types
                        WHERE container = w->>'container' AND environment = w->>'environment' AND record_type = w->>'type';
                    END IF;
                    UPDATE schema_version SET version = version + 1;
                WHEN 'addSchemaRecordType' THEN
                    INSERT INTO schema_types (container, environment, record_type)
                    VALUES (w->>'container', w->>'environment', w->>'type') ON CONFLICT DO NOTHING;
                    IF FOUND THEN UPDATE schema_version SET version = version + 1; END IF;
                WHEN 'putSubscription', 'deleteSubscription' THEN
                    IF w->>'kind' = 'putSubscription' THEN
                        INSERT INTO subscriptions (database_id, user_id, subscription_id, definition, created_at)
                        VALUES ((w->>'database')::bigint, (w->>'user')::bigint, w->>'id', decode(w->>'definition', 'base64'),
                            (w->>'createdAt')::bigint)
                        ON CONFLICT (database_id, user_id, subscription_id) DO UPDATE SET
                            definition = excluded.definition, created_at = excluded.created_at;
                    ELSE
                        DELETE FROM subscriptions
                        WHERE database_id = (w->>'database')::bigint AND user_id = (w->>'user')::bigint AND subscription_id = w->>'id';
                    END IF;
                    IF FOUND THEN
                        UPDATE counters SET value = value + 1 WHERE key = 'subscriptions_version' RETURNING value INTO new_version;
                        INSERT INTO subscription_changes (version, database_id, user_id, subscription_id)
                        VALUES (new_version, (w->>'database')::bigint, (w->>'user')::bigint, w->>'id');
                        DELETE FROM subscription_changes WHERE subscription_changes.version <= new_version - 10000;
                    END IF;
                WHEN 'appendOutbox' THEN
                    outbox_appended := true;
                    INSERT INTO change_outbox (database_id, body, created_at)
                    VALUES ((w->>'database')::bigint, decode(w->>'body', 'base64'), (w->>'createdAt')::bigint);
                WHEN 'removeOutbox' THEN
                    DELETE FROM change_outbox
                    WHERE sequence IN (SELECT value::bigint FROM jsonb_array_elements_text(w->'sequences'));
                    GET DIAGNOSTICS affected = ROW_COUNT;
                    IF affected <> jsonb_array_length(w->'sequences') THEN
                        RAISE EXCEPTION 'outbox entries were drained meanwhile' USING ERRCODE = '40001';
                    END IF;
                WHEN 'insertNotification' THEN
                    notifications_stored := true;
                    PERFORM pg_advisory_xact_lock(5138062718335353601);
                    INSERT INTO notifications (container, environment, user_id, notification_id, origin_device, payload,
                        created_at, read, collapse_id, silent)
                    VALUES (w->>'container', w->>'environment', (w->>'user')::bigint, w->>'id', w->>'origin',
                        decode(w->>'payload', 'base64'), (w->>'createdAt')::bigint, false, w->>'collapse', (w->>'silent')::boolean);
                WHEN 'markNotificationsRead' THEN
                    UPDATE notifications SET read = true
                    WHERE user_id = (w->>'user')::bigint AND container = w->>'container' AND environment = w->>'environment'
                      AND notification_id IN (SELECT value FROM jsonb_array_elements_text(w->'ids'));
                WHEN 'pruneNotifications' THEN
                    SELECT max(sequence) INTO current_value FROM notifications WHERE created_at < (w->>'before')::bigint;
                    IF current_value IS NOT NULL THEN
                        DELETE FROM notifications WHERE sequence <= current_value;
                        UPDATE counters SET value = greatest(value, current_value) WHERE key = 'notifications_pruned_through';
                    END IF;
                WHEN 'setBadge' THEN
                    INSERT INTO badges (container, environment, user_id, value)
                    VALUES (w->>'container', w->>'environment', (w->>'user')::bigint, (w->>'value')::bigint)
                    ON CONFLICT (user_id, container, environment) DO UPDATE SET value = excluded.value;
                END CASE;
            END LOOP;

            -- Databases last and in id order. No writer changes a database's row
            -- (PostgresDatabaseFeed): each holds it FOR KEY SHARE to its commit (a move's fence
            -- waits for them, and refuses those after it), marks its zones pending in the
            -- change feed, and counts its bytes on a zone row it holds already, so writers of
            -- one database's different zones never wait for one another.
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'databases') LOOP
                db := (w->>'id')::bigint;
                ids := ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(w->'stamps'));
                PERFORM 1 FROM databases WHERE id = db AND moving_to IS NULL FOR KEY SHARE;
                IF NOT FOUND THEN
                    -- A move's fence took the row since the unit read it (the fence waited for
                    -- units holding it): decided again, the unit sees the fence and refuses.
                    RAISE EXCEPTION 'database % is being moved', db USING ERRCODE = '40001';
                END IF;
                IF cardinality(ids) > 0 THEN
                    UPDATE zones SET feed_pending = true WHERE database_id = db AND id = ANY(ids) AND NOT feed_pending;
                END IF;
                IF coalesce((w->>'bytes')::bigint, 0) <> 0 THEN
                    SELECT \#(PostgresDatabaseFeed.usedBytes) INTO used FROM databases WHERE id = db;
                    IF (w->>'usageZone') IS NULL THEN
                        UPDATE databases SET used_bytes = used_bytes + (w->>'bytes')::bigint WHERE id = db;
                    ELSIF coalesce((w->>'usageAdded')::boolean, false) THEN
                        used := used - (w->>'bytes')::bigint;  -- added with the zone's checked update
                    ELSE
                        UPDATE zones SET used_bytes = used_bytes + (w->>'bytes')::bigint
                        WHERE database_id = db AND id = (w->>'usageZone')::bigint;
                    END IF;
                    -- Growth the usage found no longer leaves room for. Writers of other zones
                    -- whose bytes are not committed yet are not in it: together they may pass
                    -- the quota by what they add at once (docs/limits.md).
                    IF (w->>'bytes')::bigint > 0 AND used <> (w->>'read')::bigint
                       AND used::numeric + (w->>'bytes')::numeric > (w->>'quota')::numeric THEN
                        RAISE EXCEPTION 'database % grew past its quota since the unit read it', db USING ERRCODE = '40001';
                    END IF;
                END IF;
            END LOOP;

            -- Wake-ups for every node's notification pipeline, delivered at commit (PostgresSignals).
            IF outbox_appended THEN PERFORM pg_notify('nimbus', 'outbox'); END IF;
            IF notifications_stored THEN PERFORM pg_notify('nimbus', 'notifications'); END IF;
        END;
        """#
}

extension PostgresApply {
    /// A unit's record saves and index entries, a typed array a column (`PostgresArrayColumn`),
    /// bound after its JSON in `arguments`' order; each run of saves in the JSON names its rows'
    /// range. In the JSON, PostgreSQL spent about a quarter of a 200-record batch's apply
    /// parsing them into jsonb and their numbers into `numeric`, then taking each cell out
    /// again (docs/benchmarks.md, "Record saves as typed arrays").
    struct Rows {
        var records = Records()
        var entries = Entries()
        var tokens = Tokens()
        var pairs = Pairs()

        var columns: [any PostgresDynamicTypeEncodable] { records.columns + entries.columns + tokens.columns + pairs.columns }

        static let columnCount = Rows().columns.count

        func bind(into binds: inout PostgresBindings) {
            for column in columns { binds.append(column) }
        }

        /// The record, zone, database (nil: the function looks it up) and record type each
        /// index entry follows.
        struct Owner {
            let record: Int64
            let zone: Int64
            let database: Int64?
            let type: String
        }

        /// `rec_` in `arguments`: the record's id, zone, database, name, type, fields, parent,
        /// sequence, created at, by, device, modified at, by, device, deleted.
        struct Records: RowColumns {
            var id = PostgresArrayColumn<Int64>(), zone = PostgresArrayColumn<Int64>(), database = PostgresArrayColumn<Int64>()
            var name = PostgresArrayColumn<String>(), type = PostgresArrayColumn<String>()
            var fields = PostgresArrayColumn<ByteBuffer>(), parent = PostgresArrayColumn<String>()
            var sequence = PostgresArrayColumn<Int64>()
            var createdAt = PostgresArrayColumn<Int64>(), createdBy = PostgresArrayColumn<String>()
            var createdDevice = PostgresArrayColumn<String>()
            var modifiedAt = PostgresArrayColumn<Int64>(), modifiedBy = PostgresArrayColumn<String>()
            var modifiedDevice = PostgresArrayColumn<String>()
            var deleted = PostgresArrayColumn<Bool>()

            var count: Int { id.count }

            mutating func append(_ recordID: Int64, _ row: RecordRow, database databaseID: Int64?) {
                id.append(recordID)
                zone.append(row.zoneID)
                database.append(databaseID)
                name.append(row.recordName)
                type.append(row.recordType)
                fields.append(bytes: row.fields)
                parent.append(row.parent)
                sequence.append(row.changeSequence)
                createdAt.append(row.created.timestamp)
                createdBy.append(row.created.userRecordName)
                createdDevice.append(row.created.deviceID)
                modifiedAt.append(row.modified.timestamp)
                modifiedBy.append(row.modified.userRecordName)
                modifiedDevice.append(row.modified.deviceID)
                deleted.append(row.isDeleted)
            }

            var columns: [any PostgresDynamicTypeEncodable] {
                [
                    id, zone, database, name, type, fields, parent, sequence, createdAt, createdBy, createdDevice, modifiedAt,
                    modifiedBy, modifiedDevice, deleted,
                ]
            }
        }

        /// The owner's three columns in every kind of entry (`ent_`, `tok_`, `pair_`).
        struct OwnerColumns {
            var record = PostgresArrayColumn<Int64>(), zone = PostgresArrayColumn<Int64>(), database = PostgresArrayColumn<Int64>()

            mutating func append(_ owner: Owner) {
                record.append(owner.record)
                zone.append(owner.zone)
                database.append(owner.database)
            }

            var columns: [any PostgresDynamicTypeEncodable] { [record, zone, database] }
        }

        /// `ent_`: the owner, then the entry's key (its record type and field, `PostgresEntryKey`),
        /// position, number (exact decimal text, which `numeric` reads exactly: an INT64 past
        /// 2^53 keeps its last digit, a double its shortest exact form), text (UTF-8 bytes: the
        /// column is bytea), longitude.
        struct Entries: RowColumns {
            var owner = OwnerColumns()
            var key = PostgresArrayColumn<Int64>(), position = PostgresArrayColumn<Int32>()
            var number = PostgresArrayColumn<String>(), text = PostgresArrayColumn<ByteBuffer>()
            var longitude = PostgresArrayColumn<Double>()
            var keys = PostgresEntryKey.Memo()

            var count: Int { key.count }

            mutating func append(_ owner: Owner, _ entry: IndexEntry) {
                self.owner.append(owner)
                key.append(keys.key(owner.type, entry.field))
                position.append(Int32(entry.position))
                number.append(PostgresCoarseStorage.numericText(entry.value))
                text.append(bytes: Rows.text(entry.value))
                longitude.append(entry.longitude)
            }

            var columns: [any PostgresDynamicTypeEncodable] { owner.columns + [key, position, number, text, longitude] }
        }

        /// `tok_`: the owner, then record type, field and token.
        struct Tokens: RowColumns {
            var owner = OwnerColumns()
            var type = PostgresArrayColumn<String>(), field = PostgresArrayColumn<String>(), token = PostgresArrayColumn<String>()

            var count: Int { field.count }

            mutating func append(_ owner: Owner, _ entry: TokenEntry) {
                self.owner.append(owner)
                type.append(owner.type)
                field.append(entry.field)
                token.append(entry.token)
            }

            var columns: [any PostgresDynamicTypeEncodable] { owner.columns + [type, field, token] }
        }

        /// `pair_`: the owner, then the keys of field and sort field (`PostgresEntryKey`), the
        /// value's number and text, the sort value's number and text (as `Entries` has them).
        struct Pairs: RowColumns {
            var owner = OwnerColumns()
            var fieldKey = PostgresArrayColumn<Int64>(), sortKey = PostgresArrayColumn<Int64>()
            var valueNumber = PostgresArrayColumn<String>(), valueText = PostgresArrayColumn<ByteBuffer>()
            var sortNumber = PostgresArrayColumn<String>(), sortText = PostgresArrayColumn<ByteBuffer>()
            var keys = PostgresEntryKey.Memo()

            var count: Int { fieldKey.count }

            mutating func append(_ owner: Owner, _ entry: SortedPairEntry) {
                self.owner.append(owner)
                fieldKey.append(keys.key(owner.type, entry.pair.field))
                sortKey.append(keys.key(owner.type, entry.pair.sortField))
                valueNumber.append(PostgresCoarseStorage.numericText(entry.value))
                valueText.append(bytes: Rows.text(entry.value))
                sortNumber.append(PostgresCoarseStorage.numericText(entry.sortValue))
                sortText.append(bytes: Rows.text(entry.sortValue))
            }

            var columns: [any PostgresDynamicTypeEncodable] {
                owner.columns + [fieldKey, sortKey, valueNumber, valueText, sortNumber, sortText]
            }
        }

        /// A text value's UTF-8 bytes (nil for a number).
        static func text(_ value: IndexValue) -> String.UTF8View? {
            guard case .text(let text) = value else { return nil }
            return text.utf8
        }
    }
}

/// One kind of row in `PostgresApply.Rows`: its columns in the order `PostgresApply.arguments`
/// names them.
protocol RowColumns {
    var count: Int { get }
    var columns: [any PostgresDynamicTypeEncodable] { get }
}

extension RowColumns {
    /// Adds rows with `body` and answers their range as the function reads it: `[first, last]`,
    /// counted from 1 as PostgreSQL's arrays are (an empty range when none was added).
    mutating func adding(_ body: (inout Self) -> Void) -> JSON {
        let first = count + 1
        body(&self)
        return [.int(Int64(first)), .int(Int64(count))]
    }
}

/// A unit of work's changes as `body` reads them: JSON objects with a `kind`, bytes in base64;
/// record saves and index entries in `PostgresApply.Rows`, the JSON naming their ranges.
/// Built as NimbusWire's `JSON` and written by its serializer: Foundation's `JSONSerialization`
/// over `[String: Any]` took 70% of the server's processor time on a 200-record batch.
extension PostgresCoarseStorage {
    static func json(_ changes: UnitOfWorkChanges, databases databaseOf: DatabaseOfZone, rows: inout PostgresApply.Rows) -> JSON {
        let created = changes.createdZones
        let usageZones = usageZones(changes, databaseOf)
        var object: JSONObject = [
            // Zones made by the unit are inserted with their last record sequence
            // (`withFinalSequences`), so only committed ones are checked; in id order, as
            // `PostgresApply.body` locks them. The same update marks each pending in its
            // database's change feed and adds the unit's bytes to the one that counts them.
            "zones": .array(
                changes.zoneSequences.filter { !created.contains($0.key) }.sorted { $0.key < $1.key }.map { id, sequence in
                    var zone: JSONObject = [
                        "id": .int(id), "database": databaseOf(id), "read": .int(sequence.read), "final": .int(sequence.final),
                    ]
                    if changes.zonesChanged[id] != nil { zone["stamp"] = .bool(true) }
                    if let database = databaseOf.id(id), usageZones[database] == id, let usage = changes.usage[database] {
                        zone["bytes"] = .int(usage.bytes)
                    }
                    return .object(zone)
                }),
            "databasesRead": .array(
                changes.databasesRead.sorted { $0.key < $1.key }.map { id, read in ["id": .int(id), "read": .int(read)] }),
            "databases": .array(databases(changes, usageZones: usageZones)),
            "badgesRead": .array(
                changes.badgesRead.map { owner, value in
                    .object(Self.owner(owner).merging(["value": .int(value)]))
                }),
            "writes": .array(withFinalSequences(writes(changes.writes, databases: databaseOf, rows: &rows), changes)),
        ]
        if let version = changes.subscriptionsVersion {
            object["subscriptionsVersion"] = ["read": .int(version.read), "changes": .int(Int64(version.changes))]
        }
        if let version = changes.schemaVersionRead { object["schemaVersion"] = .int(version) }
        if !changes.zonesRead.isEmpty {
            object["zonesRead"] = .array(
                changes.zonesRead.sorted { $0.key < $1.key }.map { id, read in ["id": .int(id), "database": databaseOf(id), "read": .int(read)] })
        }
        if !changes.quotaRefusalsOverCarriedRows.isEmpty {
            object["quotaRefused"] = .array(
                changes.quotaRefusalsOverCarriedRows.sorted { $0.key < $1.key }.map { id, refusal in
                    ["id": .int(id), "bytes": .int(refusal.bytes), "quota": .int(refusal.quota)]
                })
        }
        if !changes.recordsAssumedAbsent.isEmpty {
            object["absent"] = .array(
                Dictionary(grouping: changes.recordsAssumedAbsent, by: \.zoneID).sorted { $0.key < $1.key }.map { zone, keys in
                    ["zone": .int(zone), "database": databaseOf(zone), "names": .array(keys.map(\.name).sorted().map(JSON.string))]
                })
        }
        return .object(object)
    }

    /// The zone whose row counts each database's bytes the unit adds (PostgresDatabaseFeed):
    /// the first of the database's zones whose record sequence the unit moves, a row it holds
    /// already. None (no zone of the database moved), and the database's own row counts them.
    private static func usageZones(_ changes: UnitOfWorkChanges, _ databaseOf: DatabaseOfZone) -> [Int64: Int64] {
        var zones: [Int64: Int64] = [:]
        for zone in changes.zoneSequences.keys {
            guard let database = databaseOf.id(zone), changes.usage[database] != nil else { continue }
            zones[database] = min(zones[database] ?? zone, zone)
        }
        return zones
    }

    /// Per database the unit writes in, in id order (as `PostgresApply.body` locks them): the
    /// zones still to mark pending in its change feed (those the unit neither checked nor made,
    /// which the zones' own statements mark), and the bytes to add, with what the unit read
    /// and the zone that counts them (`usageAdded`: already, by that zone's checked update).
    private static func databases(_ changes: UnitOfWorkChanges, usageZones: [Int64: Int64]) -> [JSON] {
        let marked = Set(changes.zoneSequences.keys).union(changes.createdZones)
        let stamped = Dictionary(grouping: changes.zonesChanged.filter { !marked.contains($0.key) }, by: \.value)
            .mapValues { $0.map(\.key).sorted() }
        let databases = Set(changes.zonesChanged.values).union(changes.usage.keys).union(changes.databasesWritten)
        return databases.sorted().map { id in
            var object: JSONObject = ["id": .int(id), "stamps": .array((stamped[id] ?? []).map(JSON.int))]
            if let usage = changes.usage[id] {
                object["read"] = .int(usage.read)
                object["bytes"] = .int(usage.bytes)
                object["quota"] = .int(usage.quota)
                if let zone = usageZones[id] {
                    object["usageZone"] = .int(zone)
                    object["usageAdded"] = .bool(!changes.createdZones.contains(zone))
                }
            }
            return .object(object)
        }
    }

    /// The writes, a zone the unit makes (with a database, or on its own) carrying the record
    /// sequence its records left it at as `recordSequence`: made zones are not in the checks.
    private static func withFinalSequences(_ writes: [JSON], _ changes: UnitOfWorkChanges) -> [JSON] {
        writes.map { write in
            guard case .object(var object) = write, case .string(let kind) = object["kind"],
                case .int(let zoneID) = object[kind == "createDatabase" ? "zone" : "id"],
                kind == "createDatabase" || kind == "createZone", let final = changes.zoneSequences[zoneID]?.final
            else { return write }
            object["recordSequence"] = .int(final)
            return .object(object)
        }
    }

    private static func bytes(_ bytes: [UInt8]) -> JSON { .string(Data(bytes).base64EncodedString()) }

    private static func optional(_ text: String?) -> JSON { text.map(JSON.string) ?? .null }

    private static func owner(_ owner: NotificationOwner) -> JSONObject {
        ["container": .string(owner.container), "environment": .string(owner.environment.rawValue), "user": .int(owner.userID)]
    }

    private static func schemaKey(_ key: SchemaKey) -> JSONObject {
        ["container": .string(key.container), "environment": .string(key.environment.rawValue)]
    }

    /// The writes in order, each run of record saves (`putRecord` and `replaceIndexEntries`
    /// with nothing else between them) as one `putRecords` and one `replaceIndexes`, their rows
    /// added to `rows`, which `PostgresApply.body` writes a statement per table. A record saved
    /// twice in a run (two writes of one group) is sent once, as its last version, with its
    /// last index entries.
    static func writes(_ writes: [StorageWrite], databases databaseOf: DatabaseOfZone, rows: inout PostgresApply.Rows) -> [JSON] {
        var sent: [JSON] = []
        var run = RecordRun(databaseOf: databaseOf)
        for write in writes {
            switch write {
            case .putRecord(let id, let row, _):
                run.records.put(RecordKey(zoneID: row.zoneID, name: row.recordName), (id, row))
            case .replaceIndexEntries(let recordID, let zoneID, let recordType, let index, let hadEntries):
                run.indexes.put(recordID, (zoneID, recordType, index))
                if hadEntries { run.had[recordID] = zoneID }
            default:
                sent += run.flush(into: &rows)
                sent.append(single(write, databases: databaseOf))
            }
        }
        return sent + run.flush(into: &rows)
    }

    /// The logical database of each zone a unit's JSON names, which `PostgresApply.body`'s
    /// statements name beside the zone so a Citus coordinator routes each to the database's
    /// shard: the unit's own knowledge (zones it changed or made), else what this node has
    /// read (`PostgresZoneDatabases`), else JSON null, which the function looks up itself.
    struct DatabaseOfZone {
        let known: [Int64: Int64]
        let memo: PostgresZoneDatabases

        init(_ changes: UnitOfWorkChanges, memo: PostgresZoneDatabases) {
            var known = changes.zonesChanged
            for write in changes.writes {
                switch write {
                case .createZone(let zone, _): known[zone.id] = zone.databaseID
                case .createDatabase(let row, let zoneID): known[zoneID] = row.id
                default: break
                }
            }
            self.known = known
            self.memo = memo
        }

        func callAsFunction(_ zone: Int64) -> JSON { id(zone).map(JSON.int) ?? .null }

        func id(_ zone: Int64) -> Int64? { known[zone] ?? memo.value(of: zone) }
    }

    /// The logical databases whose rows the unit writes or checks. The apply function takes
    /// the one database first (its distribution argument on Citus); a unit writing only the
    /// coordinator's tables (notifications, the outbox) touches none.
    static func databases(touchedBy changes: UnitOfWorkChanges, _ databaseOf: DatabaseOfZone) -> Set<Int64> {
        var touched = Set(databaseOf.known.values).union(changes.usage.keys).union(changes.databasesWritten)
            .union(changes.databasesRead.keys)
        for zone in changes.zoneSequences.keys { if let database = databaseOf.id(zone) { touched.insert(database) } }
        for write in changes.writes {
            switch write {
            case .putSubscription(let row): touched.insert(row.databaseID)
            case .deleteSubscription(let databaseID, _, _): touched.insert(databaseID)
            default: break
            }
        }
        return touched
    }

    /// Record saves gathered until a write of another kind.
    private struct RecordRun {
        let databaseOf: DatabaseOfZone
        var records = LastByKey<RecordKey, (id: Int64, row: RecordRow)>()
        var indexes = LastByKey<Int64, (zoneID: Int64, recordType: String, index: RecordIndexEntries)>()
        /// Records whose committed entries go first, with their zones.
        var had: [Int64: Int64] = [:]

        /// The run's writes, its rows added to `rows`.
        mutating func flush(into rows: inout PostgresApply.Rows) -> [JSON] {
            defer { self = RecordRun(databaseOf: databaseOf) }
            var sent: [JSON] = []
            if !records.isEmpty {
                let saved = records.values
                let range = rows.records.adding { columns in
                    for (id, row) in saved { columns.append(id, row, database: databaseOf.id(row.zoneID)) }
                }
                sent.append(["kind": "putRecords", "rows": range])
            }
            if !indexes.isEmpty {
                let pairs = indexes.pairs
                let owners = pairs.map { recordID, indexed in
                    PostgresApply.Rows.Owner(record: recordID, zone: indexed.zoneID, database: databaseOf.id(indexed.zoneID), type: indexed.recordType)
                }
                let entries = rows.entries.adding { columns in
                    for (owner, (_, indexed)) in zip(owners, pairs) { for entry in indexed.index.entries { columns.append(owner, entry) } }
                }
                let tokens = rows.tokens.adding { columns in
                    for (owner, (_, indexed)) in zip(owners, pairs) { for token in indexed.index.tokens { columns.append(owner, token) } }
                }
                let sortedPairs = rows.pairs.adding { columns in
                    for (owner, (_, indexed)) in zip(owners, pairs) { for pair in indexed.index.pairs { columns.append(owner, pair) } }
                }
                let had: [JSON] = had.sorted { $0.key < $1.key }.map {
                    ["record": .int($0.key), "zone": .int($0.value), "database": databaseOf($0.value)]
                }
                sent.append(["kind": "replaceIndexes", "had": .array(had), "entries": entries, "tokens": tokens, "pairs": sortedPairs])
            }
            return sent
        }
    }

    /// Values by key in the order their keys came first, each key's last value kept.
    private struct LastByKey<Key: Hashable, Value> {
        private var order: [Key] = []
        private var byKey: [Key: Value] = [:]

        var isEmpty: Bool { order.isEmpty }

        mutating func put(_ key: Key, _ value: Value) {
            if byKey.updateValue(value, forKey: key) == nil { order.append(key) }
        }

        var pairs: [(Key, Value)] { order.map { ($0, byKey[$0]!) } }
        var values: [Value] { order.map { byKey[$0]! } }
    }

    /// A write of any kind but a record save's two (those go in runs, `writes(_:)`), as its
    /// `WHEN` branch in `PostgresApply.body` reads it.
    private static func single(_ write: StorageWrite, databases databaseOf: DatabaseOfZone) -> JSON {
        var object: JSONObject
        switch write {
        case .takeIndexRebuildRequest:
            object = [:]
        case .createDatabase(let row, let zoneID):
            object = [
                "id": .int(row.id), "container": .string(row.key.container), "environment": .string(row.key.environment.rawValue),
                "scope": .string(row.key.scope.rawValue), "owner": .int(row.key.ownerID), "zone": .int(zoneID),
            ]
        case .createZone(let zone, let replacing):
            object = [
                "id": .int(zone.id), "database": .int(zone.databaseID), "name": .string(zone.name),
                "recordSequence": .int(zone.recordSequence), "replacing": replacing.map(JSON.int) ?? .null,
            ]
        case .deleteZone(let id):
            object = ["id": .int(id), "database": databaseOf(id)]
        case .putRecord, .replaceIndexEntries:
            preconditionFailure("record saves are sent in runs (writes(_:))")
        case .replaceReferences(let zoneID, let name, let rows):
            object = [
                "zone": .int(zoneID), "database": databaseOf(zoneID), "name": .string(name),
                "rows": .array(
                    rows.map {
                        [
                            "field": .string($0.fieldName), "target_zone": .int($0.targetZoneID), "target_name": .string($0.targetName),
                            "action": .string($0.action),
                        ]
                    }),
            ]
        case .replaceAssetReferences(let zoneID, let name, let container, let rows):
            object = [
                "zone": .int(zoneID), "database": databaseOf(zoneID), "name": .string(name), "container": .string(container),
                "rows": .array(
                    rows.map {
                        [
                            "field": .string($0.fieldName), "position": .int(Int64($0.position)), "checksum": .string($0.checksum),
                            "size": .int($0.size),
                        ]
                    }),
            ]
        case .addSchemaField(let key, let field):
            object = schemaKey(key).merging([
                "type": .string(field.recordType), "field": .string(field.fieldName), "fieldType": .string(field.fieldType),
                "indexes": .int(Int64(field.indexes)),
            ])
        case .setSchemaFieldIndexes(let key, let recordType, let fieldName, let indexes):
            object = schemaKey(key).merging(["type": .string(recordType), "field": .string(fieldName), "indexes": .int(Int64(indexes))])
        case .addSchemaRecordType(let key, let recordType):
            object = schemaKey(key).merging(["type": .string(recordType)])
        case .removeFromSchema(let key, let recordType, let fieldName):
            object = schemaKey(key).merging(["type": .string(recordType), "field": fieldName.map(JSON.string) ?? .null])
        case .putSubscription(let row):
            object = [
                "database": .int(row.databaseID), "user": .int(row.userID), "id": .string(row.subscriptionID),
                "definition": bytes(row.definition), "createdAt": .int(row.createdAt),
            ]
        case .deleteSubscription(let databaseID, let userID, let subscriptionID):
            object = ["database": .int(databaseID), "user": .int(userID), "id": .string(subscriptionID)]
        case .appendOutbox(let databaseID, let body, let createdAt):
            object = ["database": .int(databaseID), "body": bytes(body), "createdAt": .int(createdAt)]
        case .removeOutbox(let sequences):
            object = ["sequences": .array(sequences.map(JSON.int))]
        case .insertNotification(let owner, let notificationID, let originDeviceID, let payload, let createdAt, let delivery):
            object = Self.owner(owner).merging([
                "id": .string(notificationID), "origin": .string(originDeviceID), "payload": bytes(payload),
                "createdAt": .int(createdAt), "collapse": optional(delivery.collapseID), "silent": .bool(delivery.isSilent),
            ])
        case .markNotificationsRead(let owner, let ids):
            object = Self.owner(owner).merging(["ids": .array(ids.map(JSON.string))])
        case .pruneNotifications(let time):
            object = ["before": .int(time)]
        case .setBadge(let owner, let value):
            object = Self.owner(owner).merging(["value": .int(value)])
        }
        object["kind"] = .string(kind(write))
        return .object(object)
    }

    private static func kind(_ write: StorageWrite) -> String {
        switch write {
        case .takeIndexRebuildRequest: "takeIndexRebuildRequest"
        case .createDatabase: "createDatabase"
        case .createZone: "createZone"
        case .deleteZone: "deleteZone"
        case .putRecord, .replaceIndexEntries: preconditionFailure("record saves are sent in runs (writes(_:))")
        case .replaceReferences: "replaceReferences"
        case .replaceAssetReferences: "replaceAssetReferences"
        case .addSchemaField: "addSchemaField"
        case .setSchemaFieldIndexes: "setSchemaFieldIndexes"
        case .addSchemaRecordType: "addSchemaRecordType"
        case .removeFromSchema: "removeFromSchema"
        case .putSubscription: "putSubscription"
        case .deleteSubscription: "deleteSubscription"
        case .appendOutbox: "appendOutbox"
        case .removeOutbox: "removeOutbox"
        case .insertNotification: "insertNotification"
        case .markNotificationsRead: "markNotificationsRead"
        case .pruneNotifications: "pruneNotifications"
        case .setBadge: "setBadge"
        }
    }
}

extension JSONObject {
    /// This object with `other`'s keys added (the changes' parts share no keys).
    fileprivate func merging(_ other: JSONObject) -> JSONObject {
        var merged = self
        for (key, value) in other.pairs { merged[key] = value }
        return merged
    }
}
