@_exported import NimbusKit

// What an Apple platform's SDK gives the samples besides CloudKit: Combine's observation,
// which the sample's model declares and the tests never observe.

/// Combine's `ObservableObject`: a class (or actor) whose changes views observe.
public protocol ObservableObject: AnyObject {}

/// Combine's `@Published`: here only the stored value.
@propertyWrapper
public struct Published<Value> {
    public var wrappedValue: Value
    public init(wrappedValue: Value) { self.wrappedValue = wrappedValue }
}
