// `mlx-native kernels`: the kernel entry points of every shader file.
import ArgumentParser

struct Kernels: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the kernel entry points of every family .metal file (kernel void NAME, [[host_name(\"NAME\")]]).")

    @Argument(help: "The shaders directory.")
    var shaders: String = "shaders"

    func run() throws {
        for family in try metalFamilies(in: shaders) {
            for name in kernelEntries(family.source) {
                print("\(family.file.lastPathComponent)\t\(name)")
            }
        }
    }
}
