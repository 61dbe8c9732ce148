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
    case copiedBytes(index: Int, MTLBuffer, length: Int)
    case threadgroupMemory(index: Int, length: Int)
}

/// One binding of a kept dispatch (a replayable recording): inline data is
/// copied, since the block it came from is the caller's only during dispatch.
enum KeptBinding {
    case buffer(index: Int, MTLBuffer, offset: Int)
    case bytes(index: Int, [UInt8])
    case threadgroupMemory(index: Int, length: Int)
}

/// A step of a replayable recording, re-encoded by every replay.
enum KeptStep {
    case dispatch(pipeline: MetalPipeline, bindings: [KeptBinding], grid: MTLSize, threads: MTLSize)
    case barrier
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
    /// Record once, replay many: a replayable encoder keeps its steps (and
    /// what they bind, in `held`, until it is released); its first commit
    /// freezes them, and each replay encodes them into a new command buffer.
    public let replayable: Bool
    private var frozen = false
    private var kept: [KeptStep] = []
    /// Where each recorded dispatch lies in `kept` (a patch's dispatch index).
    private var keptDispatches: [Int] = []

    public init(device: MetalDevice, replayable: Bool = false) {
        self.device = device
        self.replayable = replayable
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
        if frozen {
            throw MlxnError.invalid("\(op): the encoder must be recording (got a replayable encoder whose recording was committed: replay it)")
        }
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

    /// Validates one packed dispatch block (layout in mlx_native.h) with the
    /// decoder every backend shares (mlx_native_block.h) and records it.
    /// Nothing is recorded when the block is invalid.
    public func dispatch(_ block: UnsafeRawPointer?, length blockLen: UInt64) throws {
        if frozen {
            throw MlxnError.invalid("dispatch: the encoder must be recording (got a replayable encoder whose recording was committed: replay it)")
        }
        var decoded = mlxn_block()
        let (pipeline, bindings) = try withUnsafeMutablePointer(to: &decoded) { blk in
            try validate(blk, block, blockLen)
        }
        let grid = decoded.grid, threads = decoded.threads
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
            case .copiedBytes(let index, let buffer, _):
                encoder.setBuffer(buffer, offset: 0, index: index)
            case .threadgroupMemory(let index, let length):
                encoder.setThreadgroupMemoryLength(length, index: index)
            }
        }
        let gridSize = MTLSize(width: Int(grid.0), height: Int(grid.1), depth: Int(grid.2))
        let threadsSize = MTLSize(width: Int(threads.0), height: Int(threads.1), depth: Int(threads.2))
        encoder.dispatchThreadgroups(gridSize, threadsPerThreadgroup: threadsSize)
        if replayable {
            keptDispatches.append(kept.count)
            kept.append(.dispatch(pipeline: pipeline, bindings: bindings.map(MetalEncoder.keep), grid: gridSize, threads: threadsSize))
        }
    }

    private static func keep(_ binding: Binding) -> KeptBinding {
        switch binding {
        case .buffer(let index, let buffer, let offset):
            return .buffer(index: index, buffer, offset: offset)
        case .bytes(let index, .some(let data), let length):
            return .bytes(index: index, [UInt8](UnsafeRawBufferPointer(start: data, count: length)))
        case .bytes(let index, .none, _):
            return .bytes(index: index, [])
        case .copiedBytes(let index, let buffer, let length):
            return .bytes(index: index, [UInt8](UnsafeRawBufferPointer(start: buffer.contents(), count: length)))
        case .threadgroupMemory(let index, let length):
            return .threadgroupMemory(index: index, length: length)
        }
    }

    /// Decodes `block` into `blk` and checks what only this backend knows (live
    /// handles, buffer lengths, the pipeline's and the device's limits); returns
    /// the pipeline and the bindings to record, or throws the shared words.
    private func validate(_ blk: UnsafeMutablePointer<mlxn_block>, _ block: UnsafeRawPointer?,
                          _ blockLen: UInt64) throws -> (MetalPipeline, [Binding]) {
        // The words of a refusal name the kernel wherever the handle is a live
        // pipeline of this device.
        func refusal(_ code: Int32) -> MlxnError {
            let pipeline = object(bits: blk.pointee.pipeline, as: MetalPipeline.self)
            let kernel = pipeline?.device === device ? pipeline?.name : nil
            var text = [CChar](repeating: 0, count: Int(MLXN_BLOCK_MESSAGE_CAP))
            let message: String = text.withUnsafeMutableBufferPointer { out in
                if let kernel {
                    kernel.withCString { name in _ = mlxn_block_message(blk, name, out.baseAddress, out.count) }
                } else {
                    _ = mlxn_block_message(blk, nil, out.baseAddress, out.count)
                }
                return String(cString: out.baseAddress!)
            }
            return MlxnError.invalid(message)
        }
        guard mlxn_block_decode(block, blockLen, blk) == MLXN_BLOCK_OK else { throw refusal(blk.pointee.error) }
        let handle = blk.pointee.pipeline
        guard let pipeline = object(bits: handle, as: MetalPipeline.self), pipeline.device === device else {
            throw refusal(mlxn_block_fail(blk, MLXN_BLOCK_E_PIPELINE, 0, handle, 0, 0))
        }
        let kernel = pipeline.name
        let threads = blk.pointee.threads
        let total = UInt64(threads.0) * UInt64(threads.1) * UInt64(threads.2)
        guard total <= UInt64(pipeline.maxThreads) else {
            throw refusal(mlxn_block_fail(blk, MLXN_BLOCK_E_THREADGROUP_SIZE, 0, total, UInt64(pipeline.maxThreads), 0))
        }
        // Metal reserves threadgroup memory in multiples of 16 bytes: the
        // decoder's sum rounds each length so.
        let maxThreadgroupMemory = device.limit(MLXN_LIMIT_MAX_THREADGROUP_MEMORY)
        let boundThreadgroupMemory = blk.pointee.threadgroup_bytes
        let staticThreadgroupMemory = pipeline.staticThreadgroupMemory
        guard boundThreadgroupMemory <= maxThreadgroupMemory,
              staticThreadgroupMemory <= maxThreadgroupMemory - boundThreadgroupMemory else {
            throw refusal(mlxn_block_fail(blk, MLXN_BLOCK_E_THREADGROUP_MEMORY, 0, boundThreadgroupMemory,
                                          maxThreadgroupMemory, staticThreadgroupMemory))
        }

        var bindings: [Binding] = []
        for i in 0..<blk.pointee.binding_count {
            let b = mlxn_block_binding_at(blk, i).pointee
            let index = Int(b.index)
            switch b.kind {
            case MLXN_BIND_BUFFER:
                guard let buffer = object(bits: b.handle, as: MetalBuffer.self), buffer.device === device else {
                    throw refusal(mlxn_block_fail(blk, MLXN_BLOCK_E_BUFFER, i, b.handle, 0, 0))
                }
                guard b.offset <= buffer.length else {
                    throw refusal(mlxn_block_fail(blk, MLXN_BLOCK_E_BUFFER_OFFSET, i, b.offset, buffer.length, 0))
                }
                bindings.append(.buffer(index: index, buffer.buffer, offset: Int(b.offset)))
            case MLXN_BIND_BYTES:
                if b.length == 0 {
                    bindings.append(.bytes(index: index, nil, length: 0))
                } else if b.length <= UInt64(maxInlineBytes) {
                    bindings.append(.bytes(index: index, UnsafeRawPointer(b.data!), length: Int(b.length)))
                } else {
                    guard let copy = device.device.makeBuffer(bytes: UnsafeRawPointer(b.data!), length: Int(b.length),
                                                              options: .storageModeShared) else {
                        throw MlxnError(MLXN_ERR_BUFFER_ALLOCATION, "metal: makeBuffer(bytes:length: \(b.length)) returned nil")
                    }
                    bindings.append(.copiedBytes(index: index, copy, length: Int(b.length)))
                }
            case MLXN_BIND_TENSOR_MAP:  // CUDA's TMA: Metal has none
                throw refusal(mlxn_block_fail(blk, MLXN_BLOCK_E_TENSOR_MAP_BACKEND, i, 0, 0, 0))
            default:  // MLXN_BIND_THREADGROUP_MEMORY: the decoder accepts no other kind
                let rounded = (b.length + 15) / 16 * 16
                if rounded > 0 { bindings.append(.threadgroupMemory(index: index, length: Int(rounded))) }
            }
        }
        let bufferMask = blk.pointee.buffer_mask, threadgroupMask = blk.pointee.threadgroup_mask
        for index in pipeline.bufferIndices where bufferMask & (1 << UInt32(index)) == 0 {
            throw MlxnError.invalid("dispatch: kernel '\(kernel)': [[buffer(\(index))]] is not bound")
        }
        for index in pipeline.threadgroupIndices where threadgroupMask & (1 << UInt32(index)) == 0 {
            throw MlxnError.invalid("dispatch: kernel '\(kernel)': [[threadgroup(\(index))]] has no threadgroup memory length")
        }
        return (pipeline, bindings)
    }

    /// Makes the buffer writes of earlier dispatches visible to later ones.
    public func barrier() throws {
        try recorder("barrier").memoryBarrier(scope: .buffers)
        if replayable { kept.append(.barrier) }
    }

    /// What mlxn_encoder_flush asks of Metal: nothing yet. One command buffer
    /// carries the whole recording and starts at its commit; the checks are
    /// the ABI's (a replayable encoder, a commit still running).
    public func flush() throws {
        if replayable {
            throw MlxnError.invalid("flush: encoder must not be replayable (its recording is captured whole at its first commit) (got a replayable encoder)")
        }
        if computeEncoder == nil && isPending {
            throw MlxnError.invalid("flush: the encoder's committed work is still running; wait for it (or poll its status) first")
        }
    }

    /// Submits what was recorded (possibly nothing) without blocking.
    public func commit() throws {
        let encoder = try recorder("commit")
        encoder.endEncoding()
        commandBuffer?.commit()
        committed = commandBuffer
        commandBuffer = nil
        computeEncoder = nil
        if replayable {
            frozen = true  // `held` stays: the kept steps bind it until the encoder goes
        } else {
            heldInFlight = held
            held = []
        }
    }

    /// What replay and patch share: a replayable encoder with no work running.
    private func checkReplayable(_ fn: String) throws {
        guard replayable else {
            throw MlxnError.invalid("\(fn): encoder must be replayable (made by mlxn_encoder_create_replayable) (got an encoder made by mlxn_encoder_create)")
        }
        if isPending {
            throw MlxnError.invalid("\(fn): encoder must have no work running (got a commit or replay still running; wait first)")
        }
    }

    /// Encodes the kept steps into a new command buffer and submits it
    /// without blocking: no dispatch block is decoded or checked again.
    public func replay() throws {
        try checkReplayable("mlxn_encoder_replay")
        guard frozen else {
            throw MlxnError.invalid("mlxn_encoder_replay: encoder must have committed its recording once (got a recording never committed)")
        }
        if let done = committed { lastGpuTimeNs = MetalEncoder.gpuTime(done) }
        guard let buffer = device.queue.makeCommandBuffer() else {
            throw MlxnError(MLXN_ERR_INTERNAL, "metal: makeCommandBuffer returned nil")
        }
        guard let encoder = buffer.makeComputeCommandEncoder(dispatchType: .concurrent) else {
            throw MlxnError(MLXN_ERR_INTERNAL, "metal: makeComputeCommandEncoder returned nil")
        }
        for step in kept {
            switch step {
            case .barrier:
                encoder.memoryBarrier(scope: .buffers)
            case .dispatch(let pipeline, let bindings, let grid, let threads):
                encoder.setComputePipelineState(pipeline.state)
                for binding in bindings {
                    switch binding {
                    case .buffer(let index, let buffer, let offset):
                        encoder.setBuffer(buffer, offset: offset, index: index)
                    case .bytes(let index, let data):
                        try MetalEncoder.setBytes(encoder, device, data, index)
                    case .threadgroupMemory(let index, let length):
                        encoder.setThreadgroupMemoryLength(length, index: index)
                    }
                }
                encoder.dispatchThreadgroups(grid, threadsPerThreadgroup: threads)
            }
        }
        encoder.endEncoding()
        buffer.commit()
        committed = buffer
    }

    /// Inline data as a dispatch binds it: setBytes up to 4 KiB, a copy in a buffer past that.
    private static func setBytes(_ encoder: MTLComputeCommandEncoder, _ device: MetalDevice, _ data: [UInt8], _ index: Int) throws {
        if data.isEmpty {
            zeroBytes.withUnsafeBytes { encoder.setBytes($0.baseAddress!, length: $0.count, index: index) }
        } else if data.count <= maxInlineBytes {
            data.withUnsafeBytes { encoder.setBytes($0.baseAddress!, length: $0.count, index: index) }
        } else {
            let copy = data.withUnsafeBytes { device.device.makeBuffer(bytes: $0.baseAddress!, length: $0.count, options: .storageModeShared) }
            guard let copy else {
                throw MlxnError(MLXN_ERR_BUFFER_ALLOCATION, "metal: makeBuffer(bytes:length: \(data.count)) returned nil")
            }
            encoder.setBuffer(copy, offset: 0, index: index)
        }
    }

    /// Replaces the inline data of one kept bytes binding (same length) for the replays that follow.
    public func patchBytes(dispatch dispatchIndex: UInt64, binding bindingIndex: UInt32, _ data: UnsafeRawPointer?, length: UInt64) throws {
        let fn = "mlxn_encoder_patch_bytes"
        try checkReplayable(fn)
        guard dispatchIndex < UInt64(keptDispatches.count) else {
            throw MlxnError.invalid("\(fn): dispatch_index must be below \(keptDispatches.count), the recorded dispatch count (got \(dispatchIndex))")
        }
        let at = keptDispatches[Int(dispatchIndex)]
        guard case .dispatch(let pipeline, var bindings, let grid, let threads) = kept[at] else {
            throw MlxnError(MLXN_ERR_INTERNAL, "\(fn): kept step \(at) is not a dispatch")
        }
        var have: [String] = []
        var hit: Int?
        for (i, binding) in bindings.enumerated() {
            guard case .bytes(let index, _) = binding else { continue }
            have.append(String(index))
            if index == Int(bindingIndex) { hit = i }
        }
        guard let hit, case .bytes(let index, let old) = bindings[hit] else {
            let list = have.isEmpty ? "none" : have.joined(separator: ", ")
            throw MlxnError.invalid("\(fn): binding_index must be a bytes binding of dispatch \(dispatchIndex) (kernel '\(pipeline.name)': \(list)) (got \(bindingIndex))")
        }
        guard length == UInt64(old.count) else {
            throw MlxnError.invalid("\(fn): len must be \(old.count), the recorded length (got \(length))")
        }
        guard let data else {
            if length == 0 { return }
            throw MlxnError.invalid("\(fn): data must be non-NULL (got NULL)")
        }
        bindings[hit] = .bytes(index: index, [UInt8](UnsafeRawBufferPointer(start: data, count: Int(length))))
        kept[at] = .dispatch(pipeline: pipeline, bindings: bindings, grid: grid, threads: threads)
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
