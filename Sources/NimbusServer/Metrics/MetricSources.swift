import Foundation
import NimbusCore
import NimbusPush
import NimbusStorage

/// The figures read when a monitor scrapes: states, not events (docs/operations.md, "Metrics").
extension ServerMetrics {
    /// The store, the assets, notification matching and the backups of a data directory.
    func addStoreSources(storage: any StorageDriver, service: NimbusService, backups: BackupKeeper) {
        addSource { metrics in
            if let figures = storage as? any StoreFigures {
                if let bytes = try? await figures.storeBytes() { metrics.set("nimbus_store_bytes", Double(bytes)) }
                if let pool = figures.poolUse {
                    metrics.set("nimbus_storage_pool_connections", Double(pool.inUse), [("state", "in_use")])
                    metrics.set("nimbus_storage_pool_connections", Double(pool.waiting), [("state", "waiting")])
                    metrics.set("nimbus_storage_pool_connections_max", Double(pool.maximum))
                }
                for replica in figures.replicas {
                    let name = [("replica", replica.name)]
                    metrics.set("nimbus_storage_replica_up", replica.isUp ? 1 : 0, name)
                    metrics.set("nimbus_storage_replica_lag_bytes", Double(replica.lagBytes), name)
                    metrics.set("nimbus_storage_replica_lag_seconds", replica.lagSeconds, name)
                    metrics.advance("nimbus_storage_replica_reads_total", to: Int64(replica.reads), name)
                }
            }
            // The home's (a PostgreSQL home is behind PartitionedStorage, partitions or not).
            if let units = (storage as? UnitOfWorkDriver) ?? ((storage as? any WrappingStorageDriver)?.wrapped as? UnitOfWorkDriver) {
                // Collisions with other nodes' writes and the zone turns they led to (PostgreSQL;
                // SQLite decides in its writer's transaction, so both stay 0 there).
                metrics.advance("nimbus_storage_write_collisions_total", to: Int64(units.writeCollisions))
                metrics.advance("nimbus_storage_zone_turns_total", to: Int64(units.zoneTurns))
            }
            if let assets = try? await service.assetFigures(container: nil) {
                metrics.set("nimbus_asset_bytes", Double(assets.bytes), [("held", "any")])
                metrics.set("nimbus_asset_bytes", Double(assets.unreferencedBytes), [("held", "none")])
                metrics.set("nimbus_asset_blobs", Double(assets.blobs), [("held", "any")])
                metrics.set("nimbus_asset_blobs", Double(assets.unreferencedBlobs), [("held", "none")])
            }
            // Writes production refused for what it still lacks: a forgotten deploy (docs/schema.md).
            // Every container's, 0 included, so one a deploy mended goes back to 0.
            if let refusals = try? await service.productionSchemaRefusals(container: nil), let containers = try? await service.containers() {
                let counts = Dictionary(grouping: refusals, by: \.container).mapValues { $0.reduce(0) { $0 + $1.count } }
                for container in containers {
                    metrics.set("nimbus_production_schema_refusals", Double(counts[container.id] ?? 0), [("container", container.id)])
                }
            }
            if let backlog = try? await service.notificationBacklog() {
                metrics.set("nimbus_notification_outbox_entries", Double(backlog.entries))
                let now = service.options.clock.nowMilliseconds()
                metrics.set("nimbus_notification_outbox_lag_seconds", Double(backlog.oldestAt.map { max(0, now - $0) } ?? 0) / 1_000)
            }
        }
        addSource { metrics in
            let status = await backups.status()
            metrics.set("nimbus_backup_configured", status.directory == nil ? 0 : 1)
            metrics.set("nimbus_backup_failures_in_a_row", Double(status.failuresInARow))
            metrics.set("nimbus_backups_kept", Double(status.backups.count))
            if let success = status.lastSuccess {
                metrics.set("nimbus_backup_last_success_timestamp_seconds", success.at.timeIntervalSince1970)
                metrics.set("nimbus_backup_last_success_bytes", Double(success.bytes))
            }
            if let failure = status.lastFailure {
                metrics.set("nimbus_backup_last_failure_timestamp_seconds", failure.at.timeIntervalSince1970)
            }
        }
    }

    /// What one server process holds: notification WebSockets and APNs deliveries.
    func addServerSources(connections: LiveConnections, apns: APNsDelivery) {
        addSource { metrics in
            metrics.set("nimbus_websocket_connections", Double(connections.count))
            let pushes = apns.statistics
            for (outcome, total) in [
                ("delivered", pushes.delivered), ("retried", pushes.retried), ("failed", pushes.failed),
                ("dropped", pushes.dropped), ("token_removed", pushes.removedTokens),
            ] {
                metrics.advance("nimbus_push_deliveries_total", to: Int64(total), [("outcome", outcome)])
            }
        }
    }
}
