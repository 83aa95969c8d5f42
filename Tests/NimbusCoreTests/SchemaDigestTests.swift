@testable import NimbusCore
import NimbusStorage
import NimbusWire
import Testing

/// A write's schema lookups are made once per schema (`SchemaDigests`): the same rows give the
/// same digest, changed rows a new one, and a digest says what the rows say.
@Suite struct SchemaDigestTests {
    private static let key = SchemaKey(container: "iCloud.c", environment: .development)

    private static func field(_ type: String, _ name: String, _ wire: String, indexes: Int = SchemaFieldRow.Indexes.all) -> SchemaFieldRow {
        SchemaFieldRow(recordType: type, fieldName: name, fieldType: wire, indexes: indexes)
    }

    @Test func aDigestSaysWhatItsRowsSay() {
        let digest = SchemaDigests().digest(
            Self.key, recordTypes: ["Item", "Note"],
            fields: [Self.field("Item", "count", "INT64"), Self.field("Item", "title", "STRING", indexes: 0), Self.field("Note", "x", "NOPE")])
        #expect(digest.recordTypes == ["Item", "Note"])
        #expect(digest.fields["Item"] == ["count": FieldType(wireName: "INT64")!, "title": FieldType(wireName: "STRING")!])
        // A type it cannot read is left out of the types, not of the index flags.
        #expect(digest.fields["Note"] == nil)
        #expect(digest.indexFlags["Item"] == ["count": SchemaFieldRow.Indexes.all, "title": 0])
        #expect(digest.indexFlags["Note"] == ["x": SchemaFieldRow.Indexes.all])
        #expect(Set(digest.grants.keys) == ["Item", "Note"])
    }

    @Test func theSameRowsGiveTheSameDigestAndChangedRowsANewOne() {
        let digests = SchemaDigests()
        let types = ["Item"]
        let fields = [Self.field("Item", "count", "INT64")]
        let first = digests.digest(Self.key, recordTypes: types, fields: fields)
        #expect(digests.digest(Self.key, recordTypes: types, fields: fields).fields == first.fields)
        // A field added, its type changed, a type added: each is seen.
        let added = digests.digest(Self.key, recordTypes: types, fields: fields + [Self.field("Item", "title", "STRING")])
        #expect(added.fields["Item"]?["title"]?.wireName == "STRING")
        let retyped = digests.digest(Self.key, recordTypes: types, fields: [Self.field("Item", "count", "DOUBLE")])
        #expect(retyped.fields["Item"]?["count"]?.wireName == "DOUBLE")
        let moreTypes = digests.digest(Self.key, recordTypes: ["Item", "Other"], fields: [Self.field("Item", "count", "DOUBLE")])
        #expect(moreTypes.recordTypes == ["Item", "Other"])
        // Another environment's schema of the same container is its own.
        let production = digests.digest(SchemaKey(container: "iCloud.c", environment: .production), recordTypes: [], fields: [])
        #expect(production.recordTypes.isEmpty)
        #expect(digests.digest(Self.key, recordTypes: ["Item", "Other"], fields: [Self.field("Item", "count", "DOUBLE")]).recordTypes.count == 2)
    }

    @Test func pastItsBoundItForgetsAndMakesThemAgain() {
        let digests = SchemaDigests()
        for number in 0...SchemaDigests.bound {
            let key = SchemaKey(container: "iCloud.c\(number)", environment: .development)
            let digest = digests.digest(key, recordTypes: ["T\(number)"], fields: [])
            #expect(digest.recordTypes == ["T\(number)"])
        }
        #expect(digests.digest(Self.key, recordTypes: ["Item"], fields: []).recordTypes == ["Item"])
    }
}
