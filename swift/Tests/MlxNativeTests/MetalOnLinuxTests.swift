// Tests of Metal on Linux (Sources/Metal) itself: the reflection it answers
// from the emulator, and that it stops what Apple's API validation stops, so
// that the backend's tests on Linux cannot pass by misusing Metal.
#if os(Linux)
import Metal
import XCTest

private let source = """
#include <metal_stdlib>
using namespace metal;

constant uint offset [[function_constant(0)]];
constant bool has_offset = is_function_constant_defined(offset);

kernel void fill(device uint* out [[buffer(0)]],
                 constant uint& base [[buffer(1)]],
                 threadgroup uint* scratch [[threadgroup(0)]],
                 uint i [[thread_position_in_grid]],
                 uint t [[thread_position_in_threadgroup]]) {
    scratch[t] = base + i + (has_offset ? offset : 0u);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = scratch[t];
}
"""

final class MetalOnLinuxTests: XCTestCase {
    var device: MTLDevice!
    var state: MTLComputePipelineState!
    var queue: MTLCommandQueue!
    var out: MTLBuffer!

    override func setUpWithError() throws {
        device = try XCTUnwrap(MTLCreateSystemDefaultDevice(), "the emulator did not load")
        let library = try device.makeLibrary(source: source, options: MTLCompileOptions())
        XCTAssertEqual(library.functionNames, ["fill"])
        let function = try library.makeFunction(name: "fill", constantValues: MTLFunctionConstantValues())
        state = try device.makeComputePipelineState(function: function, options: [], reflection: nil)
        queue = try XCTUnwrap(device.makeCommandQueue())
        out = try XCTUnwrap(device.makeBuffer(length: 64 * 4, options: .storageModeShared))
    }

    /// Encodes fill over 64 threads with `configure` applied, commits, waits.
    func run(_ configure: (MTLComputeCommandEncoder) -> Void, end: Bool = true) throws -> MTLCommandBuffer {
        let commands = try XCTUnwrap(queue.makeCommandBuffer())
        let encoder = try XCTUnwrap(commands.makeComputeCommandEncoder(dispatchType: .concurrent))
        encoder.setComputePipelineState(state)
        configure(encoder)
        encoder.dispatchThreadgroups(MTLSize(width: 2, height: 1, depth: 1),
                                     threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
        if end { encoder.endEncoding() }
        commands.commit()
        commands.waitUntilCompleted()
        return commands
    }

    func values() -> [UInt32] {
        Array(UnsafeBufferPointer(start: out.contents().assumingMemoryBound(to: UInt32.self), count: 64))
    }

    func bindAll(_ e: MTLComputeCommandEncoder, base: UInt32 = 100) {
        var base = base
        e.setBuffer(out, offset: 0, index: 0)
        e.setBytes(&base, length: 4, index: 1)
        e.setThreadgroupMemoryLength(32 * 4, index: 0)
    }

    func testReflection() throws {
        let library = try device.makeLibrary(source: source, options: nil)
        let function = try library.makeFunction(name: "fill", constantValues: MTLFunctionConstantValues())
        var reflection: MTLAutoreleasedComputePipelineReflection?
        _ = try device.makeComputePipelineState(function: function, options: .bindingInfo, reflection: &reflection)
        let bindings = try XCTUnwrap(reflection).bindings
        XCTAssertEqual(bindings.filter { $0.type == .buffer }.map { $0.index }, [0, 1])
        XCTAssertEqual(bindings.filter { $0.type == .threadgroupMemory }.map { $0.index }, [0])
        XCTAssertEqual(state.maxTotalThreadsPerThreadgroup, 1024)
    }

    func testDispatchAndFunctionConstant() throws {
        let done = try run { bindAll($0) }
        XCTAssertEqual(done.status, .completed)
        XCTAssertNil(done.error)
        XCTAssertEqual(values(), (0..<64).map { 100 + UInt32($0) })
        XCTAssertGreaterThan(done.gpuEndTime, done.gpuStartTime)

        let library = try device.makeLibrary(source: source, options: nil)
        let constants = MTLFunctionConstantValues()
        var offset: UInt32 = 1000
        constants.setConstantValue(&offset, type: .uint, index: 0)
        let function = try library.makeFunction(name: "fill", constantValues: constants)
        state = try device.makeComputePipelineState(function: function, options: [], reflection: nil)
        XCTAssertEqual(try run { bindAll($0, base: 0) }.status, .completed)
        XCTAssertEqual(values(), (0..<64).map { 1000 + UInt32($0) })
    }

    func failure(_ commands: MTLCommandBuffer) -> String {
        XCTAssertEqual(commands.status, .error)
        return commands.error.map { ($0 as NSError).localizedDescription } ?? "no error"
    }

    func testMisuseFailsTheCommandBuffer() throws {
        var big = [UInt8](repeating: 0, count: 4097)
        let tooBig = try run { e in
            bindAll(e)
            e.setBytes(&big, length: big.count, index: 1)
        }
        XCTAssertTrue(failure(tooBig).contains("more than 4096 bytes"), failure(tooBig))

        let unaligned = try run { e in
            bindAll(e)
            e.setThreadgroupMemoryLength(24, index: 0)
        }
        XCTAssertTrue(failure(unaligned).contains("multiple of 16"), failure(unaligned))

        let unbound = try run { e in
            bindAll(e)
            e.setBuffer(nil, offset: 0, index: 0)
        }
        XCTAssertTrue(failure(unbound).contains("[[buffer(0)]] is not bound"), failure(unbound))

        let notEnded = try run({ bindAll($0) }, end: false)
        XCTAssertTrue(failure(notEnded).contains("endEncoding"), failure(notEnded))

        XCTAssertEqual(values(), [UInt32](repeating: 0, count: 64), "nothing ran")
    }

    func testLibraryErrors() throws {
        XCTAssertThrowsError(try device.makeLibrary(source: "kernel void broken() { x = 1; }", options: nil)) {
            XCTAssertTrue(($0 as NSError).localizedDescription.contains("program_source:1:"), "\($0)")
        }
        XCTAssertThrowsError(try device.makeLibrary(URL: URL(fileURLWithPath: "/nonexistent.metallib")))
        let library = try device.makeLibrary(source: source, options: nil)
        XCTAssertThrowsError(try library.makeFunction(name: "missing", constantValues: MTLFunctionConstantValues()))
    }
}
#endif
