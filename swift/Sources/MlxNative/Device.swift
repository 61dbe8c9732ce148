// The device (MTLDevice + one command queue) and its buffers.
import CMlxNative
import Foundation
import Metal

public final class MetalDevice {
    public let device: MTLDevice
    let queue: MTLCommandQueue

    /// Every Apple GPU runs SIMD-groups of 32 threads (Metal feature set
    /// tables); a pipeline's threadExecutionWidth reports the same number.
    public static let simdWidth: UInt64 = 32

    /// This backend opens one device, ordinal 0: the system default GPU, the
    /// only one an Apple Silicon Mac has.
    public static var count: UInt32 {
        MTLCreateSystemDefaultDevice() == nil ? 0 : 1
    }

    public init(ordinal: UInt32) throws {
        guard ordinal == 0 else {
            throw MlxnError(MLXN_ERR_DEVICE_NOT_FOUND,
                            "metal: no device with ordinal \(ordinal) (this backend has 1 device, ordinal 0)")
        }
        guard let device = MTLCreateSystemDefaultDevice() else {
            throw MlxnError(MLXN_ERR_DEVICE_NOT_FOUND, "metal: no Metal device on this machine")
        }
        guard let queue = device.makeCommandQueue() else {
            throw MlxnError(MLXN_ERR_INTERNAL, "metal: makeCommandQueue returned nil")
        }
        self.device = device
        self.queue = queue
    }

    public var name: String { device.name }

    /// The value of an MLXN_LIMIT_* key, or 0 for an unknown key.
    public func limit(_ key: UInt32) -> UInt64 {
        switch key {
        case MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP:
            // Apple GPUs allow 1024 threads per threadgroup in total and in each
            // dimension; a pipeline may allow fewer (maxTotalThreadsPerThreadgroup).
            return UInt64(device.maxThreadsPerThreadgroup.width)
        case MLXN_LIMIT_MAX_THREADGROUP_MEMORY:
            return UInt64(device.maxThreadgroupMemoryLength)
        case MLXN_LIMIT_SIMD_WIDTH:
            return MetalDevice.simdWidth
        case MLXN_LIMIT_MAX_BUFFER_LENGTH:
            return UInt64(device.maxBufferLength)
        case MLXN_LIMIT_SHARED_MEMORY:
            return 1  // storageModeShared buffers: contents() is host-visible.
        default:
            return 0
        }
    }

    /// The metal backend has no run-time options; every key is unknown.
    public func setOption(key: String, value: String) throws {
        throw MlxnError.invalid("metal: unknown option '\(key)' (the metal backend has no options)")
    }

    public func alloc(length: UInt64) throws -> MetalBuffer {
        try MetalBuffer(device: self, length: length)
    }
}

public final class MetalBuffer {
    public let device: MetalDevice
    public let buffer: MTLBuffer
    /// The length the caller asked for (the MTLBuffer has at least 1 byte).
    public let length: UInt64

    init(device: MetalDevice, length: UInt64) throws {
        let maxLength = UInt64(device.device.maxBufferLength)
        guard length <= maxLength else {
            throw MlxnError(MLXN_ERR_BUFFER_ALLOCATION,
                            "metal: buffer length \(length) exceeds the device's maximum \(maxLength)")
        }
        // Metal cannot make a zero-length buffer; a 0-byte request gets one
        // byte that nothing can reach (every range check uses `length`).
        let allocated = Int(max(length, 1))
        guard let buffer = device.device.makeBuffer(length: allocated, options: .storageModeShared) else {
            throw MlxnError(MLXN_ERR_BUFFER_ALLOCATION, "metal: makeBuffer(length: \(allocated)) returned nil")
        }
        memset(buffer.contents(), 0, allocated)  // The ABI promises zero-filled buffers.
        self.device = device
        self.buffer = buffer
        self.length = length
    }

    public var hostPointer: UnsafeMutableRawPointer { buffer.contents() }

    func checkRange(_ op: String, offset: UInt64, count: UInt64) throws {
        guard let end = checkedAdd(offset, count), end <= length else {
            throw MlxnError.invalid(
                "\(op): offset \(offset) + length \(count) is past the end of the buffer (length \(length))")
        }
    }

    public func write(offset: UInt64, from src: UnsafeRawPointer?, count: UInt64) throws {
        try checkRange("buffer_write", offset: offset, count: count)
        guard count > 0 else { return }
        guard let src else { throw MlxnError.invalid("buffer_write: src is null") }
        (hostPointer + Int(offset)).copyMemory(from: src, byteCount: Int(count))
    }

    public func read(offset: UInt64, into dst: UnsafeMutableRawPointer?, count: UInt64) throws {
        try checkRange("buffer_read", offset: offset, count: count)
        guard count > 0 else { return }
        guard let dst else { throw MlxnError.invalid("buffer_read: dst is null") }
        dst.copyMemory(from: hostPointer + Int(offset), byteCount: Int(count))
    }
}
