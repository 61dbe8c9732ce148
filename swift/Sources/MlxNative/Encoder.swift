// Encoders: a command buffer with one concurrent compute encoder, recording the
// packed dispatch blocks of the C ABI.
import CMlxNative
import Foundation
import Metal

/// One validated binding of a dispatch block.
enum Binding {
    case buffer(index: Int, MTLBuffer, offset: Int)
    case bytes(index: Int, UnsafeRawPointer?, length: Int)
    /// Inline data over the 4 KiB that setBytes takes, copied into a buffer.
    case copiedBytes(index: Int, MTLBuffer)
    case threadgroupMemory(index: Int, length: Int)
}

/// setBytes is for data of at most 4 KiB (Metal's documented limit).
let maxInlineBytes = 4096

/// What a zero-length BYTES binding binds: 16 zero bytes (setBytes needs a
/// positive length; the kernel may not read the binding anyway).
private let zeroBytes = [UInt8](repeating: 0, count: 16)

public final class MetalEncoder {
    public let device: MetalDevice
    private var commandBuffer: MTLCommandBuffer?
    private var computeEncoder: MTLComputeCommandEncoder?
    /// The last committed command buffer, until recording starts afresh.
    private var committed: MTLCommandBuffer?
    private var lastGpuTimeNs: UInt64 = 0
    /// The pipelines and buffers the recorded dispatches bind, then those of
    /// the committed work until it has ended: a handle released meanwhile
    /// stays valid for the work that uses it (the C ABI's promise, kept here
    /// rather than left to the command buffer's retained references alone).
    private var held: [AnyObject] = []
    private var heldInFlight: [AnyObject] = []

    public init(device: MetalDevice) {
        self.device = device
    }

    deinit {
        // An encoder released while recording ends its pass, as Metal requires
        // before the command buffer goes away; the work is never committed.
        computeEncoder?.endEncoding()
    }

    private var isPending: Bool {
        guard let committed else { return false }
        return committed.status != .completed && committed.status != .error
    }

    /// MLXN_ENCODER_*; never blocks.
    public var status: Int32 {
        if computeEncoder != nil { return MLXN_ENCODER_RECORDING }
        guard let committed else { return MLXN_ENCODER_RECORDING }
        switch committed.status {
        case .completed: return MLXN_ENCODER_COMPLETED
        case .error: return MLXN_ENCODER_ERROR
        default: return MLXN_ENCODER_PENDING
        }
    }

    /// Device time of the last finished commit, in nanoseconds (0 if none).
    public var gpuTimeNs: UInt64 {
        if let committed, !isPending { return MetalEncoder.gpuTime(committed) }
        return lastGpuTimeNs
    }

    static func gpuTime(_ buffer: MTLCommandBuffer) -> UInt64 {
        let seconds = buffer.gpuEndTime - buffer.gpuStartTime
        return seconds > 0 ? UInt64((seconds * 1e9).rounded()) : 0
    }

    /// The compute encoder to record into, started on first use after a
    /// completed commit. Committed work that is still running must be waited
    /// for first: one encoder has one command buffer in flight.
    private func recorder(_ op: String) throws -> MTLComputeCommandEncoder {
        if let computeEncoder { return computeEncoder }
        if isPending {
            throw MlxnError.invalid("\(op): the encoder's committed work is still running; wait for it (or poll its status) first")
        }
        if let done = committed {
            lastGpuTimeNs = MetalEncoder.gpuTime(done)
            committed = nil
            heldInFlight = []
        }
        guard let buffer = device.queue.makeCommandBuffer() else {
            throw MlxnError(MLXN_ERR_INTERNAL, "metal: makeCommandBuffer returned nil")
        }
        // Concurrent: dispatches with no barrier between them may overlap, as
        // the ABI allows; the TypeScript encoder places a barrier wherever a
        // dispatch depends on an earlier one (memoryBarrier(scope: .buffers)).
        guard let encoder = buffer.makeComputeCommandEncoder(dispatchType: .concurrent) else {
            throw MlxnError(MLXN_ERR_INTERNAL, "metal: makeComputeCommandEncoder returned nil")
        }
        commandBuffer = buffer
        computeEncoder = encoder
        return encoder
    }

    /// Validates one packed dispatch block (layout in mlx_native.h) and records
    /// it. Nothing is recorded when the block is invalid.
    public func dispatch(_ block: UnsafeRawPointer?, length blockLen: UInt64) throws {
        let headerBytes = UInt64(MLXN_DISPATCH_HEADER_BYTES)
        let bindingBytes = UInt64(MLXN_DISPATCH_BINDING_BYTES)
        guard let block else { throw MlxnError.invalid("dispatch: block is null") }
        guard blockLen >= headerBytes else {
            throw MlxnError.invalid("dispatch: block_len must be at least \(headerBytes) (got \(blockLen))")
        }
        func u32(_ at: Int) -> UInt32 {
            UInt32(littleEndian: block.loadUnaligned(fromByteOffset: at, as: UInt32.self))
        }
        func u64(_ at: Int) -> UInt64 {
            UInt64(littleEndian: block.loadUnaligned(fromByteOffset: at, as: UInt64.self))
        }
        let grid = [u32(8), u32(12), u32(16)]
        let threads = [u32(20), u32(24), u32(28)]
        let count = u32(32)
        let payloadBytes = u32(36)
        // Both counts are 32-bit, so this sum cannot overflow 64 bits.
        let expected = headerBytes + bindingBytes * UInt64(count) + UInt64(payloadBytes)
        guard blockLen == expected else {
            throw MlxnError.invalid(
                "dispatch: block_len must be 48 + 24 * \(count) bindings + \(payloadBytes) payload bytes = \(expected) (got \(blockLen))")
        }
        guard u64(40) == 0 else { throw MlxnError.invalid("dispatch: the reserved header field must be 0 (got \(u64(40)))") }
        guard let pipeline = object(bits: u64(0), as: MetalPipeline.self) else {
            throw MlxnError.invalid("dispatch: the pipeline handle is null or not a pipeline")
        }
        guard pipeline.device === device else {
            throw MlxnError.invalid("dispatch: pipeline '\(pipeline.name)' belongs to another device")
        }
        let kernel = pipeline.name
        guard !grid.contains(0) else {
            throw MlxnError.invalid("dispatch \(kernel): threadgroups per grid must be positive (got \(grid[0])x\(grid[1])x\(grid[2]))")
        }
        guard !threads.contains(0) else {
            throw MlxnError.invalid("dispatch \(kernel): threads per threadgroup must be positive (got \(threads[0])x\(threads[1])x\(threads[2]))")
        }
        let total = threads.reduce(UInt64(1)) { $0 * UInt64($1) }
        guard total <= UInt64(pipeline.maxThreads) else {
            throw MlxnError.invalid(
                "dispatch \(kernel): threads per threadgroup must be at most \(pipeline.maxThreads) for this pipeline (got \(threads[0])x\(threads[1])x\(threads[2]) = \(total))")
        }
        for axis in 0..<3 where UInt64(grid[axis]) * UInt64(threads[axis]) > UInt64(UInt32.max) {
            throw MlxnError.invalid(
                "dispatch \(kernel): threads per grid must fit in 32 bits on each axis (got \(grid[axis]) x \(threads[axis]) on axis \(axis))")
        }

        let payloadStart = Int(headerBytes + bindingBytes * UInt64(count))
        var bindings: [Binding] = []
        var boundBuffers = Set<UInt32>()
        var boundThreadgroup = Set<UInt32>()
        var threadgroupMemory = UInt64(pipeline.staticThreadgroupMemory)
        for i in 0..<Int(count) {
            let at = Int(headerBytes) + i * Int(bindingBytes)
            let kind = u32(at), index = u32(at + 4), a = u64(at + 8), b = u64(at + 16)
            guard index < MLXN_MAX_BINDINGS else {
                throw MlxnError.invalid("dispatch \(kernel): binding \(i) index must be below \(MLXN_MAX_BINDINGS) (got \(index))")
            }
            if kind == MLXN_BIND_BUFFER || kind == MLXN_BIND_BYTES {
                guard boundBuffers.insert(index).inserted else {
                    throw MlxnError.invalid("dispatch \(kernel): binding \(i): [[buffer(\(index))]] bound twice")
                }
            } else if kind == MLXN_BIND_THREADGROUP_MEMORY {
                guard boundThreadgroup.insert(index).inserted else {
                    throw MlxnError.invalid("dispatch \(kernel): binding \(i): [[threadgroup(\(index))]] given twice")
                }
            }
            switch kind {
            case MLXN_BIND_BUFFER:
                guard let buffer = object(bits: a, as: MetalBuffer.self) else {
                    throw MlxnError.invalid("dispatch \(kernel): binding \(i) (buffer \(index)): the handle is null or not a buffer")
                }
                guard buffer.device === device else {
                    throw MlxnError.invalid("dispatch \(kernel): binding \(i) (buffer \(index)): the buffer belongs to another device")
                }
                guard b <= buffer.length else {
                    throw MlxnError.invalid(
                        "dispatch \(kernel): binding \(i) (buffer \(index)): offset \(b) is past the end of the buffer (length \(buffer.length))")
                }
                bindings.append(.buffer(index: Int(index), buffer.buffer, offset: Int(b)))
            case MLXN_BIND_BYTES:
                guard let end = checkedAdd(a, b), end <= UInt64(payloadBytes) else {
                    throw MlxnError.invalid(
                        "dispatch \(kernel): binding \(i) (bytes \(index)): payload range \(a)+\(b) is past the payload (\(payloadBytes) bytes)")
                }
                let data = block + payloadStart + Int(a)
                if b == 0 {
                    bindings.append(.bytes(index: Int(index), nil, length: 0))
                } else if b <= UInt64(maxInlineBytes) {
                    bindings.append(.bytes(index: Int(index), data, length: Int(b)))
                } else {
                    guard let copy = device.device.makeBuffer(bytes: data, length: Int(b), options: .storageModeShared) else {
                        throw MlxnError(MLXN_ERR_BUFFER_ALLOCATION, "metal: makeBuffer(bytes:length: \(b)) returned nil")
                    }
                    bindings.append(.copiedBytes(index: Int(index), copy))
                }
            case MLXN_BIND_THREADGROUP_MEMORY:
                guard b == 0 else {
                    throw MlxnError.invalid("dispatch \(kernel): binding \(i) (threadgroup \(index)): b must be 0 (got \(b))")
                }
                // Metal takes threadgroup memory lengths in multiples of 16 bytes;
                // the limit applies to what is actually reserved.
                guard a <= UInt64(device.limit(MLXN_LIMIT_MAX_THREADGROUP_MEMORY)) else {
                    throw MlxnError.invalid(
                        "dispatch \(kernel): binding \(i) (threadgroup \(index)): \(a) bytes exceed the device's threadgroup memory (\(device.limit(MLXN_LIMIT_MAX_THREADGROUP_MEMORY)) bytes)")
                }
                let rounded = (a + 15) / 16 * 16
                threadgroupMemory += rounded
                if rounded > 0 { bindings.append(.threadgroupMemory(index: Int(index), length: Int(rounded))) }
            default:
                throw MlxnError.invalid(
                    "dispatch \(kernel): binding \(i) has unknown kind \(kind) (expected 1 buffer, 2 bytes, 3 threadgroup memory)")
            }
        }
        for index in pipeline.bufferIndices where !boundBuffers.contains(UInt32(index)) {
            throw MlxnError.invalid("dispatch \(kernel): [[buffer(\(index))]] is not bound")
        }
        for index in pipeline.threadgroupIndices where !boundThreadgroup.contains(UInt32(index)) {
            throw MlxnError.invalid("dispatch \(kernel): [[threadgroup(\(index))]] has no threadgroup memory length")
        }
        let maxThreadgroupMemory = device.limit(MLXN_LIMIT_MAX_THREADGROUP_MEMORY)
        guard threadgroupMemory <= maxThreadgroupMemory else {
            throw MlxnError.invalid(
                "dispatch \(kernel): threadgroup memory must be at most \(maxThreadgroupMemory) bytes (got \(threadgroupMemory): \(pipeline.staticThreadgroupMemory) static + the rest bound, each rounded up to 16)")
        }

        let encoder = try recorder("dispatch")
        encoder.setComputePipelineState(pipeline.state)
        held.append(pipeline)
        for binding in bindings {
            switch binding {
            case .buffer(let index, let buffer, let offset):
                held.append(buffer)
                encoder.setBuffer(buffer, offset: offset, index: index)
            case .bytes(let index, .some(let data), let length):
                encoder.setBytes(data, length: length, index: index)
            case .bytes(let index, .none, _):
                zeroBytes.withUnsafeBytes { encoder.setBytes($0.baseAddress!, length: $0.count, index: index) }
            case .copiedBytes(let index, let buffer):
                encoder.setBuffer(buffer, offset: 0, index: index)
            case .threadgroupMemory(let index, let length):
                encoder.setThreadgroupMemoryLength(length, index: index)
            }
        }
        encoder.dispatchThreadgroups(
            MTLSize(width: Int(grid[0]), height: Int(grid[1]), depth: Int(grid[2])),
            threadsPerThreadgroup: MTLSize(width: Int(threads[0]), height: Int(threads[1]), depth: Int(threads[2])))
    }

    /// Makes the buffer writes of earlier dispatches visible to later ones.
    public func barrier() throws {
        try recorder("barrier").memoryBarrier(scope: .buffers)
    }

    /// Submits what was recorded (possibly nothing) without blocking.
    public func commit() throws {
        let encoder = try recorder("commit")
        encoder.endEncoding()
        commandBuffer?.commit()
        committed = commandBuffer
        commandBuffer = nil
        computeEncoder = nil
        heldInFlight = held
        held = []
    }

    /// Blocks until the committed work ends; OK when nothing was committed.
    public func wait() throws {
        guard let committed else { return }
        committed.waitUntilCompleted()
        if committed.status == .error {
            let text = committed.error.map { ($0 as NSError).localizedDescription } ?? "no error text"
            throw MlxnError(MLXN_ERR_COMMAND_BUFFER, "metal: command buffer failed: \(text)")
        }
    }
}
