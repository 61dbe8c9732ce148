// Errors, messages and handles: the plumbing between the C ABI (Exports.swift)
// and the Metal objects (Device.swift, Library.swift, Encoder.swift).
import CMlxNative
import Foundation

/// A failed call: the status the C ABI returns and the message it writes.
public struct MlxnError: Error, CustomStringConvertible {
    public let status: mlxn_status
    public let message: String

    public init(_ status: mlxn_status, _ message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { message }

    static func invalid(_ message: String) -> MlxnError {
        MlxnError(MLXN_ERR_INVALID_ARGUMENT, message)
    }
}

/// Writes `text` as a NUL-terminated string into `out`, truncated to `cap`
/// bytes including the NUL; writes nothing when `out` is null or `cap` is 0.
/// Returns the full length of `text` in bytes, without the NUL.
@discardableResult
func writeCString(_ text: String, to out: UnsafeMutablePointer<CChar>?, cap: UInt64) -> UInt64 {
    let bytes = Array(text.utf8)
    if let out, cap > 0 {
        let n = Int(min(UInt64(bytes.count), cap - 1))
        bytes.withUnsafeBytes { src in
            if n > 0 { UnsafeMutableRawPointer(out).copyMemory(from: src.baseAddress!, byteCount: n) }
        }
        out[n] = 0
    }
    return UInt64(bytes.count)
}

/// Runs the body of a fallible C ABI call: OK and an empty message on success,
/// the error's status and message on failure.
func withStatus(_ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64,
                _ body: () throws -> Void) -> mlxn_status {
    do {
        try body()
        writeCString("", to: msg, cap: msgCap)
        return MLXN_OK
    } catch let error as MlxnError {
        writeCString(error.message, to: msg, cap: msgCap)
        return error.status
    } catch {
        writeCString("metal: \(error)", to: msg, cap: msgCap)
        return MLXN_ERR_INTERNAL
    }
}

// Handles are the addresses of retained Swift objects (Unmanaged). A handle is
// read back as AnyObject and cast, so a handle of the wrong kind (a buffer
// where a pipeline is expected) is caught; a dangling or forged address is
// the caller's error, as the header says.

func makeHandle(_ object: AnyObject) -> OpaquePointer {
    OpaquePointer(Unmanaged<AnyObject>.passRetained(object).toOpaque())
}

func object<T: AnyObject>(_ handle: OpaquePointer?, as type: T.Type) -> T? {
    guard let handle else { return nil }
    return Unmanaged<AnyObject>.fromOpaque(UnsafeRawPointer(handle)).takeUnretainedValue() as? T
}

/// A handle stored as a u64 in a dispatch block.
func object<T: AnyObject>(bits: UInt64, as type: T.Type) -> T? {
    guard let raw = UnsafeRawPointer(bitPattern: UInt(bits)) else { return nil }
    return Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as? T
}

func releaseHandle(_ handle: OpaquePointer?) {
    guard let handle else { return }
    Unmanaged<AnyObject>.fromOpaque(UnsafeRawPointer(handle)).release()
}

/// `a + b`, or nil when it overflows.
func checkedAdd(_ a: UInt64, _ b: UInt64) -> UInt64? {
    let (sum, overflow) = a.addingReportingOverflow(b)
    return overflow ? nil : sum
}
