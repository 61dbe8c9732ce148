// `mlx-native info`: the device, its limits and its GPU families.
import ArgumentParser
import CMlxNative
import Metal
import MlxNative

struct Info: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the Metal device, its limits and GPU families.")

    func run() throws {
        let device: MetalDevice
        do {
            device = try MetalDevice(ordinal: 0)
        } catch let error as MlxnError {
            throw ValidationError(error.message)
        }
        let mtl = device.device
        let families: [(MTLGPUFamily, String)] = [
            (.apple7, "apple7"), (.apple8, "apple8"), (.apple9, "apple9"),
            (.mac2, "mac2"), (.metal3, "metal3"),
        ]
        let supported = families.filter { mtl.supportsFamily($0.0) }.map { $0.1 }
        print("device:                       \(device.name)")
        print("gpu families:                 \(supported.joined(separator: " "))")
        print("unified memory:               \(mtl.hasUnifiedMemory)")
        print("max threads per threadgroup:  \(device.limit(MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP))")
        print("max threadgroup memory:       \(device.limit(MLXN_LIMIT_MAX_THREADGROUP_MEMORY)) bytes")
        print("simd width:                   \(device.limit(MLXN_LIMIT_SIMD_WIDTH))")
        print("max buffer length:            \(device.limit(MLXN_LIMIT_MAX_BUFFER_LENGTH)) bytes")
        print("recommended working set:      \(mtl.recommendedMaxWorkingSetSize) bytes")
        print("abi version:                  \(mlxnAbiVersion())")
    }
}
