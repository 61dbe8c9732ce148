// The classes behind Metal.swift's protocols: each one owns one emulator
// handle (device, buffer, library, pipeline, encoder) and releases it in
// deinit. The emulator holds what a recorded or running dispatch binds, so an
// object released while its work runs stays alive for that work, as Metal's
// retained references do.
import CMlxNative
import Foundation

private func warn(_ text: String) {
    FileHandle.standardError.write(Data("Metal (CPU emulator): \(text)\n".utf8))
}

final class EmulatedDevice: MTLDevice {
    let emu: Emulator
    let handle: OpaquePointer

    /// One device per process, as MTLCreateSystemDefaultDevice returns one.
    static let shared: EmulatedDevice? = {
        switch Emulator.shared {
        case .failure(let error):
            warn("\(error)")
            return nil
        case .success(let emu):
            var out: OpaquePointer?
            let (status, message) = emu.call { emu.deviceOpen(0, &out, $0, $1) }
            guard status == MLXN_OK, let out else {
                warn("opening the emulator's device failed: \(message)")
                return nil
            }
            return EmulatedDevice(emu: emu, handle: out)
        }
    }()

    private init(emu: Emulator, handle: OpaquePointer) {
        self.emu = emu
        self.handle = handle
    }

    var name: String { emu.string { emu.deviceName(handle, $0, $1) } }

    var maxThreadsPerThreadgroup: MTLSize {
        let n = Int(emu.deviceLimit(handle, MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP))
        return MTLSize(width: n, height: n, depth: n)
    }

    var maxThreadgroupMemoryLength: Int { Int(emu.deviceLimit(handle, MLXN_LIMIT_MAX_THREADGROUP_MEMORY)) }

    var maxBufferLength: Int { Int(emu.deviceLimit(handle, MLXN_LIMIT_MAX_BUFFER_LENGTH)) }

    func makeCommandQueue() -> MTLCommandQueue? { EmulatedQueue(device: self) }

    func makeBuffer(length: Int, options: MTLResourceOptions) -> MTLBuffer? {
        guard length > 0 else { return nil }  // Metal returns nil for a zero length.
        var out: OpaquePointer?
        let (status, _) = emu.call { emu.bufferAlloc(handle, UInt64(length), &out, $0, $1) }
        guard status == MLXN_OK, let out else { return nil }
        return EmulatedBuffer(device: self, handle: out)
    }

    func makeBuffer(bytes pointer: UnsafeRawPointer, length: Int, options: MTLResourceOptions) -> MTLBuffer? {
        guard let buffer = makeBuffer(length: length, options: options) else { return nil }
        buffer.contents().copyMemory(from: pointer, byteCount: length)
        return buffer
    }

    func makeLibrary(source: String, options: MTLCompileOptions?) throws -> MTLLibrary {
        // Compiled without function constants (those not given read as
        // undefined); makeFunction(name:constantValues:) compiles the variant
        // with values. "program_source" is the name Metal's diagnostics cite.
        let code = try EmulatedCode(device: self, source: source, records: [])
        return EmulatedLibrary(device: self, source: source, base: code)
    }

    func makeLibrary(URL url: URL) throws -> MTLLibrary {
        throw metalError("MTLLibraryErrorDomain", 6,
                         "\(url.path): loading a metallib needs Apple's Metal; the CPU emulator compiles source only")
    }

    func makeComputePipelineState(
        function computeFunction: MTLFunction, options: MTLPipelineOption,
        reflection: UnsafeMutablePointer<MTLAutoreleasedComputePipelineReflection?>?
    ) throws -> MTLComputePipelineState {
        guard let function = computeFunction as? EmulatedFunction, function.code.device === self else {
            throw metalError("MTLLibraryErrorDomain", 1, "the function is not one of this device's")
        }
        var out: OpaquePointer?
        let (status, message) = emu.call { emu.pipelineCreate(function.code.handle, function.name, &out, $0, $1) }
        guard status == MLXN_OK, let out else { throw metalError("MTLLibraryErrorDomain", 5, message) }
        let state = EmulatedPipelineState(code: function.code, handle: out)
        if let reflection {
            var bindings: [MTLBinding] = []
            if options.contains(.bindingInfo) {
                bindings += state.indices(MLXN_BIND_BUFFER).map { EmulatedBinding(type: .buffer, index: $0) }
                bindings += state.indices(MLXN_BIND_THREADGROUP_MEMORY).map {
                    EmulatedBinding(type: .threadgroupMemory, index: $0)
                }
            }
            reflection.pointee = MTLComputePipelineReflection(bindings: bindings)
        }
        return state
    }
}

final class EmulatedBuffer: MTLBuffer {
    let device: EmulatedDevice
    let handle: OpaquePointer

    init(device: EmulatedDevice, handle: OpaquePointer) {
        self.device = device
        self.handle = handle
    }

    deinit { device.emu.bufferRelease(handle) }

    func contents() -> UnsafeMutableRawPointer { device.emu.bufferHostPtr(handle)! }
}

/// One compiled emulator library: a source with one set of constant values.
final class EmulatedCode {
    let device: EmulatedDevice
    let handle: OpaquePointer
    let names: [String]

    init(device: EmulatedDevice, source: String, records: [UInt32]) throws {
        let emu = device.emu
        var out: OpaquePointer?
        let bytes = Array(source.utf8)
        let (status, message) = emu.call { msg, cap in
            bytes.withUnsafeBufferPointer { src in
                records.withUnsafeBytes { constants in
                    src.withMemoryRebound(to: CChar.self) { text in
                        emu.libraryCompile(device.handle, text.baseAddress, UInt64(bytes.count), "program_source",
                                           constants.baseAddress, UInt32(records.count / 3), &out, msg, cap)
                    }
                }
            }
        }
        guard status == MLXN_OK, let out else {
            // MTLLibraryError.compileFailure is 3; anything else the emulator
            // refuses is reported as unsupported (1).
            throw metalError("MTLLibraryErrorDomain", status == MLXN_ERR_SHADER_COMPILATION ? 3 : 1, message)
        }
        self.device = device
        self.handle = out
        self.names = emu.string { emu.libraryKernelNames(out, $0, $1) }.split(separator: "\n").map(String.init)
    }

    deinit { device.emu.libraryRelease(handle) }
}

final class EmulatedLibrary: MTLLibrary {
    let device: EmulatedDevice
    let source: String
    let base: EmulatedCode
    /// Variants compiled with constant values, by their records.
    private var variants: [[UInt32]: EmulatedCode] = [:]
    private let lock = NSLock()

    init(device: EmulatedDevice, source: String, base: EmulatedCode) {
        self.device = device
        self.source = source
        self.base = base
    }

    var functionNames: [String] { base.names }

    func makeFunction(name: String, constantValues: MTLFunctionConstantValues) throws -> MTLFunction {
        let records = constantValues.records
        let code: EmulatedCode
        if records.isEmpty {
            code = base
        } else {
            lock.lock()
            defer { lock.unlock() }
            if let known = variants[records] {
                code = known
            } else {
                code = try EmulatedCode(device: device, source: source, records: records)
                variants[records] = code
            }
        }
        guard code.names.contains(name) else {
            throw metalError("MTLLibraryErrorDomain", 5, "function \(name) not found in the library")
        }
        return EmulatedFunction(code: code, name: name)
    }
}

final class EmulatedFunction: MTLFunction {
    let code: EmulatedCode
    let name: String

    init(code: EmulatedCode, name: String) {
        self.code = code
        self.name = name
    }
}

final class EmulatedBinding: MTLBinding {
    let type: MTLBindingType
    let index: Int

    init(type: MTLBindingType, index: Int) {
        self.type = type
        self.index = index
    }
}

final class EmulatedPipelineState: MTLComputePipelineState {
    let code: EmulatedCode
    let handle: OpaquePointer
    let bufferIndices: [Int]
    let threadgroupIndices: [Int]

    init(code: EmulatedCode, handle: OpaquePointer) {
        self.code = code
        self.handle = handle
        func read(_ kind: UInt32) -> [Int] {
            let emu = code.device.emu
            let count = emu.pipelineBindingIndices(handle, kind, nil, 0)
            var indices = [UInt32](repeating: 0, count: Int(count))
            _ = indices.withUnsafeMutableBufferPointer { emu.pipelineBindingIndices(handle, kind, $0.baseAddress, count) }
            return indices.map { Int($0) }
        }
        bufferIndices = read(MLXN_BIND_BUFFER)
        threadgroupIndices = read(MLXN_BIND_THREADGROUP_MEMORY)
    }

    deinit { code.device.emu.pipelineRelease(handle) }

    func indices(_ kind: UInt32) -> [Int] { kind == MLXN_BIND_BUFFER ? bufferIndices : threadgroupIndices }

    var maxTotalThreadsPerThreadgroup: Int { Int(code.device.emu.pipelineMaxThreads(handle)) }

    /// Read at each use: the emulator raises it to the most a run has used
    /// (declarations it only sees at run time).
    var staticThreadgroupMemoryLength: Int { Int(code.device.emu.pipelineStaticThreadgroupMemory(handle)) }
}

final class EmulatedQueue: MTLCommandQueue {
    let device: EmulatedDevice

    init(device: EmulatedDevice) { self.device = device }

    func makeCommandBuffer() -> MTLCommandBuffer? {
        let emu = device.emu
        var out: OpaquePointer?
        let (status, message) = emu.call { emu.encoderCreate(device.handle, &out, $0, $1) }
        guard status == MLXN_OK, let out else {
            warn("makeCommandBuffer: \(message)")
            return nil
        }
        return EmulatedCommandBuffer(device: device, handle: out)
    }
}

/// One command buffer is one emulator encoder, committed once.
final class EmulatedCommandBuffer: MTLCommandBuffer {
    let device: EmulatedDevice
    let handle: OpaquePointer
    private var encoder: EmulatedComputeEncoder?
    private var committedAt: Double?
    /// The first misuse seen while encoding or committing; the buffer fails with it.
    private var misuse: String?
    private var failure: NSError?

    init(device: EmulatedDevice, handle: OpaquePointer) {
        self.device = device
        self.handle = handle
    }

    deinit { device.emu.encoderRelease(handle) }  // waits for committed work

    func fail(_ text: String) {
        warn(text)
        if misuse == nil { misuse = text }
    }

    var status: MTLCommandBufferStatus {
        guard committedAt != nil else { return .notEnqueued }
        if misuse != nil { return .error }
        switch device.emu.encoderStatus(handle) {
        case MLXN_ENCODER_COMPLETED: return .completed
        case MLXN_ENCODER_ERROR: return .error
        default: return .committed
        }
    }

    var error: Error? {
        guard status == .error else { return nil }
        if let misuse { return metalError("MTLCommandBufferErrorDomain", 1, misuse) }
        if failure == nil { waitUntilCompleted() }
        return failure
    }

    var gpuStartTime: Double { status == .completed ? committedAt ?? 0 : 0 }

    var gpuEndTime: Double {
        guard status == .completed, let start = committedAt else { return 0 }
        return start + Double(device.emu.encoderGpuTimeNs(handle)) / 1e9
    }

    func makeComputeCommandEncoder(dispatchType: MTLDispatchType) -> MTLComputeCommandEncoder? {
        if committedAt != nil || encoder?.ended == false {
            fail("makeComputeCommandEncoder: the command buffer is committed or has an encoder that has not ended")
            return nil
        }
        let made = EmulatedComputeEncoder(commandBuffer: self, serial: dispatchType == .serial)
        encoder = made
        return made
    }

    func commit() {
        guard committedAt == nil else { return fail("commit: the command buffer is already committed") }
        committedAt = ProcessInfo.processInfo.systemUptime
        if encoder?.ended == false { fail("commit: the compute encoder has not ended (endEncoding)") }
        encoder = nil
        guard misuse == nil else { return }
        let emu = device.emu
        let (status, message) = emu.call { emu.encoderCommit(handle, $0, $1) }
        if status != MLXN_OK { fail("commit: \(message)") }
    }

    func waitUntilCompleted() {
        guard committedAt != nil, misuse == nil else { return }
        let emu = device.emu
        let (status, message) = emu.call { emu.encoderWait(handle, $0, $1) }
        if status != MLXN_OK, failure == nil { failure = metalError("MTLCommandBufferErrorDomain", 1, message) }
    }
}

final class EmulatedComputeEncoder: MTLComputeCommandEncoder {
    private enum Slot {
        case buffer(EmulatedBuffer, offset: Int)
        case bytes([UInt8])
    }

    private let commandBuffer: EmulatedCommandBuffer
    private let serial: Bool
    private(set) var ended = false
    private var dispatched = false
    private var pipeline: EmulatedPipelineState?
    private var slots: [Int: Slot] = [:]
    private var threadgroupLengths: [Int: Int] = [:]

    init(commandBuffer: EmulatedCommandBuffer, serial: Bool) {
        self.commandBuffer = commandBuffer
        self.serial = serial
    }

    private var emu: Emulator { commandBuffer.device.emu }

    private func usable(_ op: String) -> Bool {
        if ended { commandBuffer.fail("\(op) after endEncoding") }
        return !ended
    }

    func endEncoding() {
        guard usable("endEncoding") else { return }
        ended = true
    }

    func setComputePipelineState(_ state: MTLComputePipelineState) {
        guard usable("setComputePipelineState") else { return }
        guard let state = state as? EmulatedPipelineState, state.code.device === commandBuffer.device else {
            return commandBuffer.fail("setComputePipelineState: a pipeline of another device")
        }
        pipeline = state
    }

    func setBuffer(_ buffer: MTLBuffer?, offset: Int, index: Int) {
        guard usable("setBuffer") else { return }
        guard let buffer else { slots[index] = nil; return }
        guard let buffer = buffer as? EmulatedBuffer, buffer.device === commandBuffer.device else {
            return commandBuffer.fail("setBuffer(index: \(index)): a buffer of another device")
        }
        slots[index] = .buffer(buffer, offset: offset)
    }

    func setBytes(_ bytes: UnsafeRawPointer, length: Int, index: Int) {
        guard usable("setBytes") else { return }
        // Apple: "Use this method for single-use data smaller than 4 KB";
        // the API validation layer refuses more.
        guard length <= 4096 else {
            return commandBuffer.fail("setBytes(length: \(length), index: \(index)): more than 4096 bytes")
        }
        slots[index] = .bytes(Array(UnsafeRawBufferPointer(start: bytes, count: length)))
    }

    func setThreadgroupMemoryLength(_ length: Int, index: Int) {
        guard usable("setThreadgroupMemoryLength") else { return }
        guard length % 16 == 0 else {
            return commandBuffer.fail("setThreadgroupMemoryLength(\(length), index: \(index)): not a multiple of 16 bytes")
        }
        threadgroupLengths[index] = length
    }

    func memoryBarrier(scope: MTLBarrierScope) {
        guard usable("memoryBarrier"), scope.contains(.buffers) else { return }
        barrier()
    }

    private func barrier() {
        let emu = self.emu, handle = commandBuffer.handle
        let (status, message) = emu.call { emu.encoderBarrier(handle, $0, $1) }
        if status != MLXN_OK { commandBuffer.fail("memoryBarrier: \(message)") }
    }

    /// Encodes the dispatch as a block of the C ABI with what the kernel
    /// declares; a [[buffer(n)]] the kernel declares but nothing set is left
    /// out, and the emulator refuses the dispatch for it.
    func dispatchThreadgroups(_ threadgroupsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize) {
        guard usable("dispatchThreadgroups") else { return }
        guard let pipeline else { return commandBuffer.fail("dispatchThreadgroups: no pipeline state set") }
        var records: [(kind: UInt32, index: UInt32, a: UInt64, b: UInt64)] = []
        var payload: [UInt8] = []
        for index in pipeline.bufferIndices {
            switch slots[index] {
            case .buffer(let buffer, let offset):
                records.append((MLXN_BIND_BUFFER, UInt32(index), UInt64(UInt(bitPattern: UnsafeRawPointer(buffer.handle))), UInt64(offset)))
            case .bytes(let data):
                records.append((MLXN_BIND_BYTES, UInt32(index), UInt64(payload.count), UInt64(data.count)))
                payload += data
            case nil:
                break
            }
        }
        // An entry of the threadgroup memory table that was never set has
        // length 0 in Metal.
        for index in pipeline.threadgroupIndices {
            records.append((MLXN_BIND_THREADGROUP_MEMORY, UInt32(index), UInt64(threadgroupLengths[index] ?? 0), 0))
        }
        var block: [UInt8] = []
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { block += $0 } }
        func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { block += $0 } }
        func size(_ v: Int) -> UInt32 { UInt32(truncatingIfNeeded: v) }
        u64(UInt64(UInt(bitPattern: UnsafeRawPointer(pipeline.handle))))
        for v in [threadgroupsPerGrid.width, threadgroupsPerGrid.height, threadgroupsPerGrid.depth] { u32(size(v)) }
        for v in [threadsPerThreadgroup.width, threadsPerThreadgroup.height, threadsPerThreadgroup.depth] { u32(size(v)) }
        u32(UInt32(records.count))
        u32(UInt32(payload.count))
        u64(0)
        for r in records { u32(r.kind); u32(r.index); u64(r.a); u64(r.b) }
        block += payload

        // A serial encoder orders every dispatch after the one before it.
        if serial && dispatched { barrier() }
        let emu = self.emu, handle = commandBuffer.handle
        let (status, message) = block.withUnsafeBytes { raw in
            emu.call { emu.encoderDispatch(handle, raw.baseAddress, UInt64(raw.count), $0, $1) }
        }
        if status != MLXN_OK { return commandBuffer.fail("dispatchThreadgroups: \(message)") }
        dispatched = true
    }
}
