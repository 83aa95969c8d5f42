import NimbusWire

/// The order in which a `records/modify` batch is applied.
///
/// A record saved with a DELETE_SELF or VALIDATE reference to another record saved in the
/// same batch (same zone) is applied after it, so the target exists when the reference is
/// checked, and a reader of a non-atomic batch never sees the reference dangle; a share saved
/// with its root is applied after the root, for the same reason. Otherwise
/// operations keep their request order (a stable topological sort). Operations caught in a
/// cycle of such references cannot be ordered and are reported instead.
struct BatchOrder {
    /// Operation indexes, in the order to apply them.
    let order: [Int]
    /// Operations in (or behind) a reference cycle, with the names involved.
    let cyclic: [Int: [String]]

    init(_ operations: [RecordOperationInput], zoneName: String) {
        let targetsByOperation = operations.map { $0.type.isDelete ? [] : Self.orderingTargets(of: $0.record, zoneName: zoneName) }
        // Most batches hold no such reference and no share: request order, without indexing
        // every name of the batch (a dictionary of 200 names for each batch of creates).
        let savesShares = operations.contains { !$0.type.isDelete && ($0.record.share != nil || $0.record.forRecord != nil) }
        guard savesShares || targetsByOperation.contains(where: { !$0.isEmpty }) else {
            self.order = Array(operations.indices)
            self.cyclic = [:]
            return
        }
        var indexByName: [String: Int] = [:]
        for (index, operation) in operations.enumerated() where !operation.type.isDelete {
            if let name = operation.record.recordName, indexByName[name] == nil { indexByName[name] = index }
        }
        // A share saved with its root comes after the root (docs/sharing.md), so the root
        // exists, with its share set, when the share is checked.
        var rootByShare: [String: String] = [:]
        for operation in operations where !operation.type.isDelete {
            if let share = operation.record.share, let root = operation.record.recordName { rootByShare[share] = root }
        }
        var dependents: [[Int]] = Array(repeating: [], count: operations.count)
        var pending = Array(repeating: 0, count: operations.count)
        for (index, operation) in operations.enumerated() where !operation.type.isDelete {
            var names = targetsByOperation[index]
            if let name = operation.record.recordName, let root = rootByShare[name] { names.append(root) }
            if let root = operation.record.forRecord?.recordName { names.append(root) }
            let targets = Set(names.compactMap { indexByName[$0] }).subtracting([index])
            for target in targets {
                dependents[target].append(index)
                pending[index] += 1
            }
        }
        // Most batches order nothing: request order, without the sort's quadratic search.
        guard pending.contains(where: { $0 > 0 }) else {
            self.order = Array(operations.indices)
            self.cyclic = [:]
            return
        }
        // Kahn's algorithm, always taking the earliest ready operation.
        var ready = (0..<operations.count).filter { pending[$0] == 0 }
        var order: [Int] = []
        order.reserveCapacity(operations.count)
        while let next = ready.min() {
            ready.removeAll { $0 == next }
            order.append(next)
            for dependent in dependents[next] {
                pending[dependent] -= 1
                if pending[dependent] == 0 { ready.append(dependent) }
            }
        }
        var cyclic: [Int: [String]] = [:]
        let stuck = (0..<operations.count).filter { pending[$0] > 0 }
        let names = stuck.compactMap { operations[$0].record.recordName }
        for index in stuck { cyclic[index] = names }
        self.order = order
        self.cyclic = cyclic
    }

    /// Record names this record points at with DELETE_SELF or VALIDATE, in its own zone.
    static func orderingTargets(of record: RecordInput, zoneName: String) -> [String] {
        var targets: [String] = []
        for (_, field) in record.fields ?? [] {
            let values: [JSON]
            switch field.value {
            case .array(let elements): values = elements
            case .object: values = [field.value]
            default: continue
            }
            for value in values {
                guard let name = value[WireKey.recordName]?.stringValue,
                    let action = value[WireKey.action]?.stringValue.flatMap({ ReferenceAction(rawValue: $0.uppercased()) }),
                    action != .none
                else { continue }
                let targetZone = value[WireKey.zoneID]?[WireKey.zoneName]?.stringValue ?? zoneName
                if targetZone == zoneName { targets.append(name) }
            }
        }
        return targets
    }
}
