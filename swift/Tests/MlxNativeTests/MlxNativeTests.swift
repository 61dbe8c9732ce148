// Tests of the C ABI as the TypeScript layer calls it: through the exported
// functions, with packed dispatch blocks and caller-owned message buffers.
import CMlxNative
import Foundation
import Metal
import MlxNative
import XCTest

private let addSource = """
#include <metal_stdlib>
using namespace metal;

constant float scale [[function_constant(0)]];
constant bool has_scale = is_function_constant_defined(scale);

kernel void add_one(device float* x [[buffer(0)]],
                    constant uint& n [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    if (i < n) x[i] = (has_scale ? x[i] * scale : x[i]) + 1.0f;
}

kernel void uses_threadgroup(device float* x [[buffer(0)]],
                             threadgroup float* scratch [[threadgroup(0)]],
                             uint i [[thread_position_in_threadgroup]]) {
    scratch[i] = float(i);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[i] = scratch[i];
}
"""

/// Little-endian builder of one dispatch block (layout in mlx_native.h).
private struct Block {
    var bindings: [(kind: UInt32, index: UInt32, a: UInt64, b: UInt64)] = []
    var payload: [UInt8] = []

    mutating func buffer(_ index: UInt32, _ handle: OpaquePointer?, offset: UInt64 = 0) {
        bindings.append((MLXN_BIND_BUFFER, index, bits(handle), offset))
    }

    mutating func bytes(_ index: UInt32, _ data: [UInt8]) {
        bindings.append((MLXN_BIND_BYTES, index, UInt64(payload.count), UInt64(data.count)))
        payload += data
    }

    mutating func threadgroupMemory(_ index: UInt32, _ length: UInt64) {
        bindings.append((MLXN_BIND_THREADGROUP_MEMORY, index, length, 0))
    }

    func encode(pipeline: OpaquePointer?, grid: [UInt32], threads: [UInt32]) -> [UInt8] {
        var out: [UInt8] = []
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }
        func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }
        u64(bits(pipeline))
        grid.forEach(u32)
        threads.forEach(u32)
        u32(UInt32(bindings.count))
        u32(UInt32(payload.count))
        u64(0)
        for b in bindings { u32(b.kind); u32(b.index); u64(b.a); u64(b.b) }
        return out + payload
    }
}

private func bits(_ handle: OpaquePointer?) -> UInt64 {
    UInt64(UInt(bitPattern: UnsafeRawPointer(handle)))
}

private func le(_ v: UInt32) -> [UInt8] { withUnsafeBytes(of: v.littleEndian) { Array($0) } }

final class MlxNativeTests: XCTestCase {
    var msg = [CChar](repeating: 0, count: 4096)
    var device: OpaquePointer?

    var message: String { String(cString: msg) }

    override func setUpWithError() throws {
        try XCTSkipIf(mlxnDeviceCount() == 0, "no Metal device")
        var out: OpaquePointer?
        XCTAssertEqual(mlxnDeviceOpen(0, &out, &msg, UInt64(msg.count)), MLXN_OK, message)
        device = out
    }

    override func tearDown() {
        mlxnDeviceClose(device)
    }

    func compile(_ source: String, name: String = "test.metal", constants: [UInt32] = []) -> (Int32, OpaquePointer?) {
        var out: OpaquePointer?
        let bytes = Array(source.utf8)
        let status = bytes.withUnsafeBufferPointer { src in
            constants.withUnsafeBytes { records in
                src.baseAddress!.withMemoryRebound(to: CChar.self, capacity: bytes.count) { text in
                    mlxnLibraryCompile(device, text, UInt64(bytes.count), name, records.baseAddress,
                                       UInt32(constants.count / 3), &out, &msg, UInt64(msg.count))
                }
            }
        }
        return (status, out)
    }

    func pipeline(_ library: OpaquePointer?, _ name: String) -> (Int32, OpaquePointer?) {
        var out: OpaquePointer?
        let status = mlxnPipelineCreate(library, name, &out, &msg, UInt64(msg.count))
        return (status, out)
    }

    func alloc(_ length: UInt64) -> OpaquePointer? {
        var out: OpaquePointer?
        XCTAssertEqual(mlxnBufferAlloc(device, length, &out, &msg, UInt64(msg.count)), MLXN_OK, message)
        return out
    }

    func encoder() -> OpaquePointer? {
        var out: OpaquePointer?
        XCTAssertEqual(mlxnEncoderCreate(device, &out, &msg, UInt64(msg.count)), MLXN_OK, message)
        return out
    }

    func dispatch(_ encoder: OpaquePointer?, _ block: [UInt8], length: UInt64? = nil) -> Int32 {
        block.withUnsafeBytes { raw in
            mlxnEncoderDispatch(encoder, raw.baseAddress, length ?? UInt64(block.count), &msg, UInt64(msg.count))
        }
    }

    func floats(_ buffer: OpaquePointer?, _ count: Int) -> [Float] {
        var out = [Float](repeating: .nan, count: count)
        out.withUnsafeMutableBytes { raw in
            XCTAssertEqual(mlxnBufferRead(buffer, 0, raw.baseAddress, UInt64(raw.count), &msg, UInt64(msg.count)), MLXN_OK)
        }
        return out
    }

    func testBackend() {
        XCTAssertEqual(mlxnAbiVersion(), MLXN_ABI_VERSION)
        XCTAssertEqual(String(cString: mlxnBackendName()!), "metal")
        XCTAssertEqual(mlxnDeviceCount(), 1)
        var out: OpaquePointer?
        XCTAssertEqual(mlxnDeviceOpen(1, &out, &msg, UInt64(msg.count)), MLXN_ERR_DEVICE_NOT_FOUND)
        XCTAssertNil(out)
    }

    func testDeviceNameAndLimits() {
        let full = mlxnDeviceName(device, nil, 0)
        XCTAssertGreaterThan(full, 0)
        var small = [CChar](repeating: 1, count: 4)
        XCTAssertEqual(mlxnDeviceName(device, &small, 4), full)
        XCTAssertEqual(small[3], 0, "truncated to cap - 1 bytes and NUL-terminated")
        let mtl = MTLCreateSystemDefaultDevice()!
        XCTAssertEqual(String(cString: small), String(mtl.name.utf8.prefix(3))!)
        XCTAssertEqual(mlxnDeviceLimit(device, MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP), UInt64(mtl.maxThreadsPerThreadgroup.width))
        XCTAssertEqual(mlxnDeviceLimit(device, MLXN_LIMIT_MAX_THREADGROUP_MEMORY), UInt64(mtl.maxThreadgroupMemoryLength))
        XCTAssertEqual(mlxnDeviceLimit(device, MLXN_LIMIT_SIMD_WIDTH), 32)
        XCTAssertEqual(mlxnDeviceLimit(device, MLXN_LIMIT_SHARED_MEMORY), 1)
        XCTAssertEqual(mlxnDeviceLimit(device, MLXN_LIMIT_MAX_BUFFER_LENGTH), UInt64(mtl.maxBufferLength))
        XCTAssertEqual(mlxnDeviceLimit(device, 99), 0)
        XCTAssertEqual(mlxnDeviceSetOption(device, "schedule", "random", &msg, UInt64(msg.count)), MLXN_ERR_INVALID_ARGUMENT)
        XCTAssertTrue(message.contains("schedule"), message)
    }

    func testBufferZeroFilledAndRoundTrip() {
        let buffer = alloc(1000)
        defer { mlxnBufferRelease(buffer) }
        XCTAssertEqual(mlxnBufferLength(buffer), 1000)
        let host = mlxnBufferHostPtr(buffer)!.assumingMemoryBound(to: UInt8.self)
        XCTAssertTrue((0..<1000).allSatisfy { host[$0] == 0 })
        let data: [UInt8] = [1, 2, 3, 4]
        XCTAssertEqual(mlxnBufferWrite(buffer, 996, data, 4, &msg, UInt64(msg.count)), MLXN_OK)
        var back = [UInt8](repeating: 0, count: 4)
        XCTAssertEqual(mlxnBufferRead(buffer, 996, &back, 4, &msg, UInt64(msg.count)), MLXN_OK)
        XCTAssertEqual(back, data)
        XCTAssertEqual(mlxnBufferWrite(buffer, 997, data, 4, &msg, UInt64(msg.count)), MLXN_ERR_INVALID_ARGUMENT)
        XCTAssertEqual(mlxnBufferRead(buffer, UInt64.max, &back, 4, &msg, UInt64(msg.count)), MLXN_ERR_INVALID_ARGUMENT)
    }

    func testDispatchAddOne() throws {
        let (status, library) = compile(addSource)
        XCTAssertEqual(status, MLXN_OK, message)
        defer { mlxnLibraryRelease(library) }
        let names = mlxnLibraryKernelNames(library, nil, 0)
        var text = [CChar](repeating: 0, count: Int(names) + 1)
        XCTAssertEqual(mlxnLibraryKernelNames(library, &text, UInt64(text.count)), names)
        XCTAssertEqual(String(cString: text), "add_one\nuses_threadgroup")

        let (pstatus, pipe) = pipeline(library, "add_one")
        XCTAssertEqual(pstatus, MLXN_OK, message)
        defer { mlxnPipelineRelease(pipe) }
        XCTAssertGreaterThanOrEqual(mlxnPipelineMaxThreads(pipe), 256)

        let n: UInt32 = 1000
        let x = alloc(UInt64(n) * 4)
        defer { mlxnBufferRelease(x) }
        let enc = encoder()
        defer { mlxnEncoderRelease(enc) }
        XCTAssertEqual(mlxnEncoderStatus(enc), MLXN_ENCODER_RECORDING)
        XCTAssertEqual(mlxnEncoderWait(enc, &msg, UInt64(msg.count)), MLXN_OK, "waiting with nothing committed")

        var block = Block()
        block.buffer(0, x)
        block.bytes(1, le(n))
        let bytes = block.encode(pipeline: pipe, grid: [(n + 255) / 256, 1, 1], threads: [256, 1, 1])
        for round in 1...2 {  // the encoder records afresh after completion
            XCTAssertEqual(dispatch(enc, bytes), MLXN_OK, message)
            XCTAssertEqual(mlxnEncoderBarrier(enc, &msg, UInt64(msg.count)), MLXN_OK, message)
            XCTAssertEqual(dispatch(enc, bytes), MLXN_OK, message)
            XCTAssertEqual(mlxnEncoderCommit(enc, &msg, UInt64(msg.count)), MLXN_OK, message)
            XCTAssertEqual(mlxnEncoderWait(enc, &msg, UInt64(msg.count)), MLXN_OK, message)
            XCTAssertEqual(mlxnEncoderStatus(enc), MLXN_ENCODER_COMPLETED)
            XCTAssertGreaterThan(mlxnEncoderGpuTimeNs(enc), 0)
            XCTAssertEqual(floats(x, Int(n)), [Float](repeating: Float(2 * round), count: Int(n)))
        }
    }

    func testFunctionConstant() {
        // scale = 3.0f: x = 0 * 3 + 1.
        let (status, library) = compile(addSource, constants: [0, MLXN_CONST_F32, Float(3).bitPattern])
        XCTAssertEqual(status, MLXN_OK, message)
        defer { mlxnLibraryRelease(library) }
        let (_, pipe) = pipeline(library, "add_one")
        defer { mlxnPipelineRelease(pipe) }
        let x = alloc(16)
        defer { mlxnBufferRelease(x) }
        let initial: [Float] = [1, 2, 3, 4]
        XCTAssertEqual(mlxnBufferWrite(x, 0, initial, 16, &msg, UInt64(msg.count)), MLXN_OK)
        let enc = encoder()
        defer { mlxnEncoderRelease(enc) }
        var block = Block()
        block.buffer(0, x)
        block.bytes(1, le(4))
        XCTAssertEqual(dispatch(enc, block.encode(pipeline: pipe, grid: [1, 1, 1], threads: [4, 1, 1])), MLXN_OK, message)
        XCTAssertEqual(mlxnEncoderCommit(enc, &msg, UInt64(msg.count)), MLXN_OK)
        XCTAssertEqual(mlxnEncoderWait(enc, &msg, UInt64(msg.count)), MLXN_OK)
        XCTAssertEqual(floats(x, 4), [4, 7, 10, 13])

        let (bad, _) = compile(addSource, constants: [0, 99, 0])
        XCTAssertEqual(bad, MLXN_ERR_INVALID_ARGUMENT)
    }

    func testCompileAndKernelErrors() {
        let (status, library) = compile("#include <metal_stdlib>\nkernel void broken() { undeclared = 1; }\n", name: "broken.metal")
        XCTAssertEqual(status, MLXN_ERR_SHADER_COMPILATION)
        XCTAssertNil(library)
        XCTAssertTrue(message.contains("broken.metal:2:"), message)

        let (ok, lib) = compile(addSource)
        XCTAssertEqual(ok, MLXN_OK, message)
        defer { mlxnLibraryRelease(lib) }
        let (missing, pipe) = pipeline(lib, "no_such_kernel")
        XCTAssertEqual(missing, MLXN_ERR_KERNEL_NOT_FOUND)
        XCTAssertNil(pipe)
    }

    func testDispatchErrors() {
        let (_, lib) = compile(addSource)
        defer { mlxnLibraryRelease(lib) }
        let (_, pipe) = pipeline(lib, "add_one")
        defer { mlxnPipelineRelease(pipe) }
        let (_, tgPipe) = pipeline(lib, "uses_threadgroup")
        defer { mlxnPipelineRelease(tgPipe) }
        let x = alloc(64)
        defer { mlxnBufferRelease(x) }
        let enc = encoder()
        defer { mlxnEncoderRelease(enc) }
        let invalid = MLXN_ERR_INVALID_ARGUMENT

        var good = Block()
        good.buffer(0, x)
        good.bytes(1, le(16))
        let goodBytes = good.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])
        XCTAssertEqual(dispatch(enc, goodBytes, length: UInt64(goodBytes.count - 1)), invalid, "block_len mismatch")
        XCTAssertEqual(dispatch(enc, Array(goodBytes.prefix(40))), invalid, "shorter than the header")
        // The words of mlx_native_block.h, the same on every backend.
        XCTAssertEqual(message, "dispatch: block_len must be at least 48, the header's size (got 40)")
        XCTAssertEqual(dispatch(enc, good.encode(pipeline: pipe, grid: [0, 1, 1], threads: [16, 1, 1])), invalid)
        XCTAssertEqual(dispatch(enc, good.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 0, 1])), invalid)
        XCTAssertEqual(dispatch(enc, good.encode(pipeline: pipe, grid: [1, 1, 1], threads: [2048, 1, 1])), invalid)
        XCTAssertEqual(dispatch(enc, good.encode(pipeline: x, grid: [1, 1, 1], threads: [16, 1, 1])), invalid,
                       "a buffer handle where the pipeline goes")

        var highIndex = Block()
        highIndex.buffer(31, x)
        XCTAssertEqual(dispatch(enc, highIndex.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)

        var pastEnd = Block()
        pastEnd.buffer(0, x, offset: 65)
        XCTAssertEqual(dispatch(enc, pastEnd.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)
        XCTAssertEqual(message, "dispatch: kernel 'add_one': binding 0 (buffer [[buffer(0)]]): offset must be at most the buffer's length, 64 bytes (got 65)")

        var tooMuchShared = Block()
        tooMuchShared.buffer(0, x)
        tooMuchShared.threadgroupMemory(0, 32768 + 16)
        XCTAssertEqual(dispatch(enc, tooMuchShared.encode(pipeline: tgPipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)

        var unbound = Block()
        unbound.buffer(0, x)
        XCTAssertEqual(dispatch(enc, unbound.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)
        XCTAssertTrue(message.contains("[[buffer(1)]] is not bound"), message)

        var twice = Block()
        twice.buffer(0, x)
        twice.buffer(0, x)
        twice.bytes(1, le(16))
        XCTAssertEqual(dispatch(enc, twice.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)
        XCTAssertEqual(message, "dispatch: kernel 'add_one': binding 1 (buffer [[buffer(0)]]): [[buffer(0)]] must be bound once (binding 0 binds it too)")

        var badKind = Block()
        badKind.bindings.append((9, 0, 0, 0))
        XCTAssertEqual(dispatch(enc, badKind.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)
        XCTAssertEqual(message, "dispatch: kernel 'add_one': binding 0: kind must be 1 (buffer), 2 (bytes), 3 (threadgroup memory) or 4 (tensor map) (got 9)")

        // A well-formed tensor map (CUDA's TMA): Metal has none.
        var tensorMap = Block()
        tensorMap.buffer(0, x)
        tensorMap.bytes(1, le(16))
        tensorMap.payload += [UInt8](repeating: 0, count: 12)
        tensorMap.bindings.append((MLXN_BIND_TENSOR_MAP, 2, bits(x), 16))
        tensorMap.payload += [UInt8](repeating: 0, count: Int(MLXN_TMAP_DESC_BYTES))
        XCTAssertEqual(dispatch(enc, tensorMap.encode(pipeline: pipe, grid: [1, 1, 1], threads: [16, 1, 1])), invalid)
        XCTAssertEqual(message, "dispatch: kernel 'add_one': binding 2 (tensor map [[buffer(2)]]): the binding must be a buffer or bytes: this backend has no tensor maps (CUDA's, on compute capability 9.0 and later)")

        // Nothing above was recorded: the encoder commits an empty command buffer.
        XCTAssertEqual(mlxnEncoderCommit(enc, &msg, UInt64(msg.count)), MLXN_OK)
        XCTAssertEqual(mlxnEncoderWait(enc, &msg, UInt64(msg.count)), MLXN_OK)
        XCTAssertEqual(floats(x, 16), [Float](repeating: 0, count: 16))
    }

    func testMessageTruncation() {
        var tiny = [CChar](repeating: 1, count: 8)
        var out: OpaquePointer?
        XCTAssertEqual(mlxnDeviceOpen(7, &out, &tiny, 8), MLXN_ERR_DEVICE_NOT_FOUND)
        XCTAssertEqual(tiny[7], 0)
        XCTAssertEqual(strlen(tiny), 7)
        XCTAssertEqual(mlxnDeviceOpen(7, &out, nil, 0), MLXN_ERR_DEVICE_NOT_FOUND, "msg may be null when msg_cap is 0")
    }
}
