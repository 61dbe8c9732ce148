// mlx-native: the command-line tool of the metal backend.
import ArgumentParser

@main
struct MlxNativeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mlx-native",
        abstract: "Inspect the Metal device and check the shaders of mlx-native.",
        subcommands: [Info.self, Kernels.self, Compile.self, Metallib.self]
    )
}
