// View models as SwiftUI apps write them: an `@Observable` model everywhere, and the older
// `ObservableObject` with `@Published` where Combine exists (Apple platforms).
import Foundation
import NimbusKit
import Observation

#if canImport(Combine)
import Combine

@MainActor
final class PublishedNotesModel: ObservableObject {
    @Published private(set) var notes: [Note] = []
    @Published var error: CKError?
    private let database = CKContainer.default().privateCloudDatabase

    func refresh() async {
        do {
            let query = CKQuery(recordType: "Note", predicate: NSPredicate(value: true))
            let (results, _) = try await database.records(matching: query)
            notes = results.compactMap { try? $0.1.get() }.map(Note.init)
        } catch let error as CKError {
            self.error = error
        } catch {}
    }
}
#endif

@MainActor
@Observable
final class ObservedNotesModel {
    private(set) var notes: [Note] = []
    private(set) var status: CKAccountStatus = .couldNotDetermine
    var lastError: (any Error)?
    @ObservationIgnored private let container = CKContainer.default()

    func load() async {
        do {
            status = try await container.accountStatus()
            let query = CKQuery(recordType: "Note", predicate: NSPredicate(format: "count > 0"))
            let (results, _) = try await container.privateCloudDatabase.records(matching: query, desiredKeys: ["title", "count"])
            notes = results.compactMap { try? $0.1.get() }.map(Note.init)
        } catch {
            lastError = error
        }
    }

    func add(title: String) {
        let record = CKRecord(recordType: "Note")
        record["title"] = title
        Task {
            do {
                let saved = try await container.privateCloudDatabase.save(record)
                notes.append(Note(record: saved))
            } catch {
                lastError = error
            }
        }
    }
}
