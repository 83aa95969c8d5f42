// Declarations of the part of Apple's Security framework NimbusKit calls (the keychain's
// SecItem functions and their keys), written from Apple's documentation so that
// scripts/apple-api-check.sh can type-check NimbusKit's Apple-only code on Linux. Never linked,
// never run: the bodies only satisfy the compiler.
//
// Core Foundation types are modelled by what Swift bridges them to on Apple platforms: a
// CFString converts `as String`, a Swift dictionary converts `as CFDictionary`, a CFTypeRef is
// any object. A misuse that only toll-free bridging would reject is not caught here.
import Foundation

public typealias OSStatus = Int32
public typealias CFString = String
public typealias CFDictionary = [AnyHashable: Any]
public typealias CFTypeRef = AnyObject

// Result codes (SecBase.h).
public var errSecSuccess: OSStatus { 0 }
public var errSecItemNotFound: OSStatus { -25300 }
public var errSecDuplicateItem: OSStatus { -25299 }
public var errSecInteractionNotAllowed: OSStatus { -25308 }

// Keychain items (SecItem.h).
public func SecItemCopyMatching(_ query: CFDictionary, _ result: UnsafeMutablePointer<CFTypeRef?>?) -> OSStatus { declared() }
public func SecItemAdd(_ attributes: CFDictionary, _ result: UnsafeMutablePointer<CFTypeRef?>?) -> OSStatus { declared() }
public func SecItemUpdate(_ query: CFDictionary, _ attributesToUpdate: CFDictionary) -> OSStatus { declared() }
public func SecItemDelete(_ query: CFDictionary) -> OSStatus { declared() }

// Item class and attribute keys.
public let kSecClass: CFString = declared()
public let kSecClassGenericPassword: CFString = declared()
public let kSecAttrService: CFString = declared()
public let kSecAttrAccount: CFString = declared()
public let kSecAttrAccessGroup: CFString = declared()
public let kSecAttrAccessible: CFString = declared()
public let kSecAttrAccessibleAfterFirstUnlock: CFString = declared()
public let kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly: CFString = declared()
public let kSecAttrAccessibleWhenUnlocked: CFString = declared()
public let kSecAttrAccessibleWhenUnlockedThisDeviceOnly: CFString = declared()
public let kSecAttrSynchronizable: CFString = declared()
// Search and return keys.
public let kSecMatchLimit: CFString = declared()
public let kSecMatchLimitOne: CFString = declared()
public let kSecMatchLimitAll: CFString = declared()
public let kSecReturnData: CFString = declared()
public let kSecReturnAttributes: CFString = declared()
public let kSecValueData: CFString = declared()

func declared<T>() -> T { fatalError("a declaration for type-checking only") }
