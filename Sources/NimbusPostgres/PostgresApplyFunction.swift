/// `nimbus_apply(changes jsonb)`: a unit of work's writes, applied in one statement (one round
/// trip) and one transaction, in the order the unit made them, after checking what the unit
/// decided from (`UnitOfWorkChanges`): a database sequence, the subscriptions version, a badge
/// or an outbox entry that changed meanwhile raises SQLSTATE 40001, which the driver reports
/// as `StorageError.serializationFailure` and `RetryingStorage` answers by running the unit
/// again. Frozen with the migration that created it (PostgresMigrations); a change is a new
/// migration with `CREATE OR REPLACE FUNCTION`.
///
/// It ends by signalling every node (`NOTIFY nimbus`, sent at commit) when it left outbox
/// entries or notifications (`PostgresSignals`).
///
/// Writers of one database queue on its row (`FOR UPDATE` in the checks), so their outbox
/// entries commit in their order; notifications take a transaction advisory lock before they
/// get their sequence, so a later sequence never becomes visible before an earlier one.
/// The JSON's shape is `PostgresCoarseStorage.json(_:)`'s.
enum PostgresApplyFunction {
    static let v2 = #"""
        CREATE FUNCTION nimbus_apply(changes jsonb) RETURNS void LANGUAGE plpgsql AS $$
        DECLARE
            w jsonb;
            current_value bigint;
            new_version bigint;
            affected bigint;
            outbox_appended boolean := false;
            notifications_stored boolean := false;
            db bigint;  -- the logical database of the zone a write names (nimbus_zone_database)
        BEGIN
            FOR w IN SELECT * FROM jsonb_array_elements(changes->'sequences') LOOP
                IF NOT (w->>'created')::boolean THEN
                    SELECT sequence INTO current_value FROM databases WHERE id = (w->>'id')::bigint FOR UPDATE;
                    IF current_value IS DISTINCT FROM (w->>'read')::bigint THEN
                        RAISE EXCEPTION 'database % changed since the unit read it', w->>'id' USING ERRCODE = '40001';
                    END IF;
                END IF;
            END LOOP;
            IF changes ? 'subscriptionsVersion' THEN
                SELECT value INTO current_value FROM counters WHERE key = 'subscriptions_version' FOR UPDATE;
                IF current_value <> (changes->'subscriptionsVersion'->>'read')::bigint THEN
                    RAISE EXCEPTION 'subscriptions changed since the unit read them' USING ERRCODE = '40001';
                END IF;
            END IF;
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
                    INSERT INTO databases (id, container, environment, scope, owner_id, sequence)
                    VALUES ((w->>'id')::bigint, w->>'container', w->>'environment', w->>'scope', (w->>'owner')::bigint, 0)
                    ON CONFLICT (container, environment, scope, owner_id) DO NOTHING;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'the database was made meanwhile' USING ERRCODE = '40001';
                    END IF;
                    INSERT INTO zones (id, database_id, name, change_sequence, deleted)
                    VALUES ((w->>'zone')::bigint, (w->>'id')::bigint, '_defaultZone', 0, false);
                WHEN 'createZone' THEN
                    DELETE FROM zones WHERE database_id = (w->>'database')::bigint AND name = w->>'name' AND deleted;
                    INSERT INTO zones (id, database_id, name, change_sequence, deleted)
                    VALUES ((w->>'id')::bigint, (w->>'database')::bigint, w->>'name', (w->>'sequence')::bigint, false);
                WHEN 'deleteZone' THEN
                    db := nimbus_zone_database((w->>'id')::bigint);
                    DELETE FROM field_index WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM record_tokens WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM pair_index WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM records WHERE database_id = db AND zone_id = (w->>'id')::bigint;
                    DELETE FROM record_references WHERE database_id = db AND source_zone_id = (w->>'id')::bigint;
                    UPDATE zones SET deleted = true, change_sequence = (w->>'sequence')::bigint
                    WHERE database_id = db AND id = (w->>'id')::bigint;
                WHEN 'touchZone' THEN
                    UPDATE zones SET change_sequence = (w->>'sequence')::bigint
                    WHERE id = (w->>'id')::bigint AND change_sequence < (w->>'sequence')::bigint;
                WHEN 'putRecord' THEN
                    INSERT INTO records (database_id, id, zone_id, record_name, record_type, fields, parent, change_sequence, created_at,
                        created_by, created_device, modified_at, modified_by, modified_device, deleted)
                    VALUES (nimbus_zone_database((w->>'zone')::bigint), (w->>'id')::bigint, (w->>'zone')::bigint, w->>'name', w->>'type', decode(w->>'fields', 'base64'),
                        w->>'parent', (w->>'sequence')::bigint, (w->>'createdAt')::bigint, w->>'createdBy', w->>'createdDevice',
                        (w->>'modifiedAt')::bigint, w->>'modifiedBy', w->>'modifiedDevice', (w->>'deleted')::boolean)
                    ON CONFLICT (database_id, zone_id, record_name) DO UPDATE SET
                        record_type = excluded.record_type, fields = excluded.fields, parent = excluded.parent,
                        change_sequence = excluded.change_sequence, created_at = excluded.created_at,
                        created_by = excluded.created_by, created_device = excluded.created_device,
                        modified_at = excluded.modified_at, modified_by = excluded.modified_by,
                        modified_device = excluded.modified_device, deleted = excluded.deleted
                    WHERE records.id = excluded.id;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'record % was replaced meanwhile', w->>'name' USING ERRCODE = '40001';
                    END IF;
                WHEN 'replaceIndexEntries' THEN
                    db := nimbus_zone_database((w->>'zone')::bigint);
                    IF (w->>'had')::boolean THEN
                        DELETE FROM field_index WHERE database_id = db AND record_id = (w->>'record')::bigint;
                        DELETE FROM record_tokens WHERE database_id = db AND record_id = (w->>'record')::bigint;
                        DELETE FROM pair_index WHERE database_id = db AND record_id = (w->>'record')::bigint;
                    END IF;
                    INSERT INTO field_index (database_id, record_id, field, position, zone_id, record_type, num, text, lon)
                    SELECT db, (w->>'record')::bigint, e.field, e.position, (w->>'zone')::bigint, w->>'type', e.num::numeric, decode(e.text, 'base64'), e.lon
                    FROM jsonb_to_recordset(w->'entries') AS e(field text, position integer, num text, text text, lon double precision);
                    IF jsonb_array_length(w->'tokens') > 0 THEN
                        INSERT INTO record_tokens (database_id, record_id, zone_id, record_type, lexemes)
                        SELECT db, (w->>'record')::bigint, (w->>'zone')::bigint, w->>'type', array_to_tsvector(array_agg(DISTINCT l.lexeme))
                        FROM jsonb_to_recordset(w->'tokens') AS t(field text, token text)
                        CROSS JOIN LATERAL (VALUES (t.token), (t.field || ':' || t.token)) AS l(lexeme);
                    END IF;
                    INSERT INTO pair_index (database_id, record_id, field, sort_field, zone_id, record_type, value_num, value_text, sort_num, sort_text)
                    SELECT db, (w->>'record')::bigint, p.field, p.sort_field, (w->>'zone')::bigint, w->>'type',
                        p.value_num::numeric, decode(p.value_text, 'base64'), p.sort_num::numeric, decode(p.sort_text, 'base64')
                    FROM jsonb_to_recordset(w->'pairs')
                        AS p(field text, sort_field text, value_num text, value_text text, sort_num text, sort_text text);
                WHEN 'replaceReferences' THEN
                    db := nimbus_zone_database((w->>'zone')::bigint);
                    DELETE FROM record_references
                    WHERE database_id = db AND source_zone_id = (w->>'zone')::bigint AND source_name = w->>'name';
                    INSERT INTO record_references (database_id, source_zone_id, source_name, field_name, target_zone_id, target_name, action)
                    SELECT db, (w->>'zone')::bigint, w->>'name', r.field, r.target_zone, r.target_name, r.action
                    FROM jsonb_to_recordset(w->'rows') AS r(field text, target_zone bigint, target_name text, action text);
                WHEN 'addSchemaField' THEN
                    INSERT INTO schema_fields (container, environment, record_type, field_name, field_type, indexes)
                    VALUES (w->>'container', w->>'environment', w->>'type', w->>'field', w->>'fieldType', (w->>'indexes')::integer)
                    ON CONFLICT DO NOTHING;
                WHEN 'setSchemaFieldIndexes' THEN
                    UPDATE schema_fields SET indexes = (w->>'indexes')::integer
                    WHERE container = w->>'container' AND environment = w->>'environment' AND record_type = w->>'type'
                      AND field_name = w->>'field';
                WHEN 'addSchemaRecordType' THEN
                    INSERT INTO schema_types (container, environment, record_type)
                    VALUES (w->>'container', w->>'environment', w->>'type') ON CONFLICT DO NOTHING;
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

            UPDATE databases SET sequence = (s->>'final')::bigint
            FROM jsonb_array_elements(changes->'sequences') AS s
            WHERE databases.id = (s->>'id')::bigint;

            -- Wake-ups for every node's notification pipeline, delivered at commit (PostgresSignals).
            IF outbox_appended THEN PERFORM pg_notify('nimbus', 'outbox'); END IF;
            IF notifications_stored THEN PERFORM pg_notify('nimbus', 'notifications'); END IF;
        END;
        $$
        """#

    /// v2 and record bytes (`DatabaseRow.usedBytes`): a deleted zone's live records leave its
    /// database's count, and each database's `usage` from the unit is added with its final
    /// sequence. Written as the edits to v2 so the difference is all there is to read.
    static let v3: String = {
        var text = Edits(base: v2, name: "v2", into: "v3")
        text.edit("CREATE FUNCTION nimbus_apply", "CREATE OR REPLACE FUNCTION nimbus_apply")
        text.edit(
            """
                        db := nimbus_zone_database((w->>'id')::bigint);
                        DELETE FROM field_index WHERE database_id = db AND zone_id = (w->>'id')::bigint;
            """,
            """
                        db := nimbus_zone_database((w->>'id')::bigint);
                        UPDATE databases SET used_bytes = used_bytes - (
                            SELECT coalesce(sum(octet_length(record_name) + octet_length(record_type) + octet_length(fields)), 0)
                            FROM records WHERE database_id = db AND zone_id = (w->>'id')::bigint AND NOT deleted)
                        WHERE id = db;
                        DELETE FROM field_index WHERE database_id = db AND zone_id = (w->>'id')::bigint;
            """)
        text.edit(
            "UPDATE databases SET sequence = (s->>'final')::bigint\n",
            "UPDATE databases SET sequence = (s->>'final')::bigint, used_bytes = used_bytes + (s->>'usage')::bigint\n")
        return text.result
    }()

    /// v3 and asset references (docs/assets.md): a record's are replaced with it, a deleted
    /// zone's go with it and free their bytes. Written as the edits to v3.
    static let v4: String = {
        var text = Edits(base: v3, name: "v3", into: "v4")
        text.edit(
            """
                            FROM records WHERE database_id = db AND zone_id = (w->>'id')::bigint AND NOT deleted)
                        WHERE id = db;
            """,
            """
                            FROM records WHERE database_id = db AND zone_id = (w->>'id')::bigint AND NOT deleted)
                          - (SELECT coalesce(sum(size), 0) FROM asset_references
                             WHERE database_id = db AND source_zone_id = (w->>'id')::bigint)
                        WHERE id = db;
                        DELETE FROM asset_references WHERE database_id = db AND source_zone_id = (w->>'id')::bigint;
            """)
        text.edit(
            """
                    WHEN 'addSchemaField' THEN
            """,
            """
                    WHEN 'replaceAssetReferences' THEN
                        db := nimbus_zone_database((w->>'zone')::bigint);
                        DELETE FROM asset_references
                        WHERE database_id = db AND source_zone_id = (w->>'zone')::bigint AND source_name = w->>'name';
                        INSERT INTO asset_references (database_id, source_zone_id, source_name, field_name, position, container, checksum, size)
                        SELECT db, (w->>'zone')::bigint, w->>'name', a.field, a.position, w->>'container', a.checksum, a.size
                        FROM jsonb_to_recordset(w->'rows') AS a(field text, position integer, checksum text, size bigint);
                    WHEN 'addSchemaField' THEN
            """)
        return text.result
    }()

    /// v4 and schema removals (the dashboard's "delete a field" and reset of the development
    /// environment): a field, or a record type with all its fields. Written as the edits to v4.
    static let v5: String = {
        var text = Edits(base: v4, name: "v4", into: "v5")
        text.edit(
            """
                    WHEN 'addSchemaRecordType' THEN
            """,
            """
                    WHEN 'removeFromSchema' THEN
                        DELETE FROM schema_fields
                        WHERE container = w->>'container' AND environment = w->>'environment' AND record_type = w->>'type'
                          AND (w->>'field' IS NULL OR field_name = w->>'field');
                        IF w->>'field' IS NULL THEN
                            DELETE FROM schema_types
                            WHERE container = w->>'container' AND environment = w->>'environment' AND record_type = w->>'type';
                        END IF;
                    WHEN 'addSchemaRecordType' THEN
            """)
        return text.result
    }()

    /// v2's answer to a record name that exists: the row is updated when it is the same record
    /// (same id), and left alone otherwise (so the save counts no row and fails the unit).
    static let recordConflict: String = {
        let start = v2.range(of: "ON CONFLICT (database_id, zone_id, record_name) DO UPDATE SET")!
        let end = v2.range(of: "WHERE records.id = excluded.id;", range: start.upperBound..<v2.endIndex)!
        return String(v2[start.lowerBound..<end.upperBound])
    }()

    /// v5 and set-based writes (issue 35): a run of record saves comes as one `putRecords`
    /// (every record once, its last version) and one `replaceIndexes` (every record's last
    /// entries, tokens and pairs), each applied as one statement per table instead of a few per
    /// record: PL/pgSQL spent about 0.35 ms a record on the one-by-one form, most of it starting
    /// statements. A record replaced meanwhile (another id under its name) still fails the
    /// unit with 40001. The driver sends every run of saves this way, ending a run at any
    /// other write so the order holds (`PostgresCoarseStorage.writes`); the one-by-one kinds
    /// stay in the function, unsent since. Written as the edits to v5.
    static let v6: String = {
        var text = Edits(base: v5, name: "v5", into: "v6")
        text.edit(
            "db bigint;  -- the logical database of the zone a write names (nimbus_zone_database)\n",
            "db bigint;  -- the logical database of the zone a write names (nimbus_zone_database)\n"
                + "            ids bigint[];  -- records of one database whose index entries a run of saves replaces\n")
        text.edit(
            """
                    WHEN 'replaceIndexEntries' THEN
            """,
            """
                    WHEN 'putRecords' THEN
                        INSERT INTO records (database_id, id, zone_id, record_name, record_type, fields, parent, change_sequence,
                            created_at, created_by, created_device, modified_at, modified_by, modified_device, deleted)
                        SELECT z.database_id, r.id, r.zone, r.name, r.type, decode(r.fields, 'base64'), r.parent, r.sequence,
                            r."createdAt", r."createdBy", r."createdDevice", r."modifiedAt", r."modifiedBy", r."modifiedDevice", r.deleted
                        FROM jsonb_to_recordset(w->'rows') AS r(id bigint, zone bigint, name text, type text, fields text, parent text,
                            sequence bigint, "createdAt" bigint, "createdBy" text, "createdDevice" text, "modifiedAt" bigint,
                            "modifiedBy" text, "modifiedDevice" text, deleted boolean)
                        JOIN zones z ON z.id = r.zone
                        WHERE true
                        \(recordConflict)
                        GET DIAGNOSTICS affected = ROW_COUNT;
                        IF affected <> jsonb_array_length(w->'rows') THEN
                            RAISE EXCEPTION 'a record was replaced meanwhile' USING ERRCODE = '40001';
                        END IF;
                    WHEN 'replaceIndexes' THEN
                        -- By database and id array, which the primary keys serve whatever the
                        -- plan (a join with the JSON's rows let a cached plan scan whole tables).
                        FOR db, ids IN
                            SELECT z.database_id, array_agg(h.record)
                            FROM jsonb_to_recordset(w->'had') AS h(record bigint, zone bigint) JOIN zones z ON z.id = h.zone
                            GROUP BY z.database_id
                        LOOP
                            DELETE FROM field_index WHERE database_id = db AND record_id = ANY(ids);
                            DELETE FROM record_tokens WHERE database_id = db AND record_id = ANY(ids);
                            DELETE FROM pair_index WHERE database_id = db AND record_id = ANY(ids);
                        END LOOP;
                        INSERT INTO field_index (database_id, record_id, field, position, zone_id, record_type, num, text, lon)
                        SELECT z.database_id, e.record, e.field, e.position, e.zone, e.type, e.num::numeric, decode(e.text, 'base64'), e.lon
                        FROM jsonb_to_recordset(w->'entries')
                            AS e(record bigint, zone bigint, type text, field text, position integer, num text, text text, lon double precision)
                        JOIN zones z ON z.id = e.zone;
                        INSERT INTO record_tokens (database_id, record_id, zone_id, record_type, lexemes)
                        SELECT z.database_id, t.record, t.zone, t.type, array_to_tsvector(array_agg(DISTINCT l.lexeme))
                        FROM jsonb_to_recordset(w->'tokens') AS t(record bigint, zone bigint, type text, field text, token text)
                        CROSS JOIN LATERAL (VALUES (t.token), (t.field || ':' || t.token)) AS l(lexeme)
                        JOIN zones z ON z.id = t.zone
                        GROUP BY z.database_id, t.record, t.zone, t.type;
                        INSERT INTO pair_index (database_id, record_id, field, sort_field, zone_id, record_type, value_num, value_text,
                            sort_num, sort_text)
                        SELECT z.database_id, p.record, p.field, p.sort_field, p.zone, p.type, p.value_num::numeric,
                            decode(p.value_text, 'base64'), p.sort_num::numeric, decode(p.sort_text, 'base64')
                        FROM jsonb_to_recordset(w->'pairs') AS p(record bigint, zone bigint, type text, field text, sort_field text,
                            value_num text, value_text text, sort_num text, sort_text text)
                        JOIN zones z ON z.id = p.zone;
                    WHEN 'replaceIndexEntries' THEN
            """)
        return text.result
    }()

    /// v6 ordered by zone instead of by database (issue 35: order only where CloudKit orders).
    /// A unit's checks name the zones whose records it changed or that it deleted (`zones`:
    /// each zone's `record_sequence` must still be the one read, the zone still there; the
    /// same statement moves it on and locks the row), so writers of different zones never
    /// fail one another. They meet only at the end, where each database the unit changed
    /// (`databases`, in id order) stamps the zones it changed with its next sequences (taken
    /// above those zones' record sequences, so a zone made again never repeats a change tag)
    /// and adds the unit's bytes, refusing growth the quota no longer allows: one statement a
    /// database, its row locked from there to the commit only. A database's zone list read for
    /// a write (`databasesRead`) must still be as read. A zone is made only over the tombstone
    /// the unit saw (`replacing`), with the record sequence its records left it at. Every
    /// statement finds zones by id (`zones_by_id`) and databases by key: none scans a table.
    /// Written as the edits to v6.
    static let v7: String = {
        var text = Edits(base: v6, name: "v6", into: "v7")
        text.edit(
            "ids bigint[];  -- records of one database whose index entries a run of saves replaces\n",
            "ids bigint[];  -- records of one database whose index entries a run of saves replaces (zones to stamp, at the end)\n"
                + "            used bigint;  -- a database's bytes before the unit's\n")
        text.edit(
            """
                FOR w IN SELECT * FROM jsonb_array_elements(changes->'sequences') LOOP
                    IF NOT (w->>'created')::boolean THEN
                        SELECT sequence INTO current_value FROM databases WHERE id = (w->>'id')::bigint FOR UPDATE;
                        IF current_value IS DISTINCT FROM (w->>'read')::bigint THEN
                            RAISE EXCEPTION 'database % changed since the unit read it', w->>'id' USING ERRCODE = '40001';
                        END IF;
                    END IF;
                END LOOP;
            """,
            """
                -- Zones in id order (the unit sends them sorted): two units never wait for each
                -- other in a circle.
                FOR w IN SELECT * FROM jsonb_array_elements(changes->'zones') LOOP
                    UPDATE zones SET record_sequence = (w->>'final')::bigint
                    WHERE id = (w->>'id')::bigint AND record_sequence = (w->>'read')::bigint AND NOT deleted;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'zone % changed since the unit read it', w->>'id' USING ERRCODE = '40001';
                    END IF;
                END LOOP;
                FOR w IN SELECT * FROM jsonb_array_elements(changes->'databasesRead') LOOP
                    SELECT sequence INTO current_value FROM databases WHERE id = (w->>'id')::bigint FOR UPDATE;
                    IF current_value IS DISTINCT FROM (w->>'read')::bigint THEN
                        RAISE EXCEPTION 'database % changed since the unit read its zones', w->>'id' USING ERRCODE = '40001';
                    END IF;
                END LOOP;
            """)
        text.edit(
            """
                        INSERT INTO zones (id, database_id, name, change_sequence, deleted)
                        VALUES ((w->>'zone')::bigint, (w->>'id')::bigint, '_defaultZone', 0, false);
            """,
            """
                        INSERT INTO zones (id, database_id, name, change_sequence, record_sequence, deleted)
                        VALUES ((w->>'zone')::bigint, (w->>'id')::bigint, '_defaultZone', 0,
                            coalesce((w->>'recordSequence')::bigint, 0), false);
            """)
        text.edit(
            """
                    WHEN 'createZone' THEN
                        DELETE FROM zones WHERE database_id = (w->>'database')::bigint AND name = w->>'name' AND deleted;
                        INSERT INTO zones (id, database_id, name, change_sequence, deleted)
                        VALUES ((w->>'id')::bigint, (w->>'database')::bigint, w->>'name', (w->>'sequence')::bigint, false);
            """,
            """
                    WHEN 'createZone' THEN
                        -- Only over the tombstone the unit saw (or none): a zone made, or made and
                        -- deleted, meanwhile leaves a row of that name and fails the unit.
                        DELETE FROM zones WHERE database_id = (w->>'database')::bigint AND name = w->>'name' AND deleted
                          AND id = (w->>'replacing')::bigint;
                        INSERT INTO zones (id, database_id, name, change_sequence, record_sequence, deleted)
                        VALUES ((w->>'id')::bigint, (w->>'database')::bigint, w->>'name', 0, (w->>'recordSequence')::bigint, false)
                        ON CONFLICT (database_id, name) DO NOTHING;
                        IF NOT FOUND THEN
                            RAISE EXCEPTION 'zone % was made or deleted meanwhile', w->>'name' USING ERRCODE = '40001';
                        END IF;
            """)
        text.edit(
            """
                        UPDATE zones SET deleted = true, change_sequence = (w->>'sequence')::bigint
                        WHERE database_id = db AND id = (w->>'id')::bigint;
                    WHEN 'touchZone' THEN
                        UPDATE zones SET change_sequence = (w->>'sequence')::bigint
                        WHERE id = (w->>'id')::bigint AND change_sequence < (w->>'sequence')::bigint;
            """,
            """
                        UPDATE zones SET deleted = true WHERE database_id = db AND id = (w->>'id')::bigint;
            """)
        text.edit(
            """
                UPDATE databases SET sequence = (s->>'final')::bigint, used_bytes = used_bytes + (s->>'usage')::bigint
                FROM jsonb_array_elements(changes->'sequences') AS s
                WHERE databases.id = (s->>'id')::bigint;
            """,
            """
                -- Databases last and in id order: writers of one database's different zones
                -- queue here only, for the commit.
                FOR w IN SELECT * FROM jsonb_array_elements(changes->'databases') LOOP
                    db := (w->>'id')::bigint;
                    ids := ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(w->'stamps'));
                    UPDATE databases SET
                        sequence = CASE WHEN cardinality(ids) = 0 THEN sequence ELSE greatest(sequence,
                            (SELECT max(record_sequence) FROM zones WHERE id = ANY(ids))) + cardinality(ids) END,
                        used_bytes = used_bytes + coalesce((w->>'bytes')::bigint, 0)
                    WHERE id = db
                    RETURNING sequence, used_bytes - coalesce((w->>'bytes')::bigint, 0) INTO current_value, used;
                    IF cardinality(ids) > 0 THEN
                        UPDATE zones SET change_sequence = current_value - cardinality(ids) + array_position(ids, id)
                        WHERE id = ANY(ids);
                    END IF;
                    IF (w->>'bytes')::bigint > 0 AND used <> (w->>'read')::bigint
                       AND used::numeric + (w->>'bytes')::numeric > (w->>'quota')::numeric THEN
                        RAISE EXCEPTION 'database % grew past its quota since the unit read it', db USING ERRCODE = '40001';
                    END IF;
                END LOOP;
            """)
        return text.result
    }()

    /// A version written as edits to the one before it, so the difference is all there is to
    /// read; an edit whose text is not there stops the program (the versions are frozen).
    struct Edits {
        private(set) var result: String
        let name: String
        let version: String

        init(base: String, name: String, into version: String) {
            result = base
            self.name = name
            self.version = version
        }

        mutating func edit(_ old: String, _ new: String) {
            precondition(result.contains(old), "nimbus_apply \(name) lacks the text \(version) edits")
            result = result.replacingOccurrences(of: old, with: new)
        }
    }
}
