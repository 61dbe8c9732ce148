// `mlx-native metallib`: precompiles every family's program with the Metal
// toolchain (xcrun metal, xcrun metallib) into <out>/<family>.metallib, next to
// the program it was built from, as <family>.metal (the prelude, common.h, the family
// header and the kernels, joined as the TypeScript registry joins them). The library loads such a
// metallib (from the `metallib` folder next to it) only for a source that is
// byte-for-byte that copy; any other source is compiled at run time.
import ArgumentParser
import Foundation

struct Metallib: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Build <family>.metallib for every .metal file with xcrun metal / xcrun metallib.")

    @Argument(help: "The shaders directory.")
    var shaders: String = "shaders"

    @Option(name: .shortAndLong, help: "Output directory.")
    var out: String = "build/metal/metallib"

    func run() throws {
        guard xcrun(["-sdk", "macosx", "--find", "metal"], quiet: true) == 0,
              xcrun(["-sdk", "macosx", "--find", "metallib"], quiet: true) == 0 else {
            throw ValidationError("the Metal toolchain (xcrun metal, xcrun metallib) is not installed")
        }
        let fm = FileManager.default
        let outDir = URL(fileURLWithPath: out, isDirectory: true)
        try fm.createDirectory(at: outDir, withIntermediateDirectories: true)
        let scratch = fm.temporaryDirectory.appendingPathComponent("mlx-native-air-\(getpid())", isDirectory: true)
        try fm.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? fm.removeItem(at: scratch) }

        var failures = 0
        for family in try metalFamilies(in: shaders) {
            let stem = family.name
            // The program the library compiles (prelude, header, kernels), as one file.
            let program = scratch.appendingPathComponent(stem + ".metal")
            try Data(family.source.utf8).write(to: program)
            let air = scratch.appendingPathComponent(stem + ".air")
            let lib = outDir.appendingPathComponent(stem + ".metallib")
            // The same language version and math mode as the run-time compile.
            let ok = xcrun(["-sdk", "macosx", "metal", "-std=metal3.1", "-fno-fast-math",
                            "-c", program.path, "-o", air.path]) == 0
                && xcrun(["-sdk", "macosx", "metallib", air.path, "-o", lib.path]) == 0
            guard ok else {
                failures += 1
                continue
            }
            let copy = outDir.appendingPathComponent(stem + ".metal")
            try? fm.removeItem(at: copy)
            try fm.copyItem(at: program, to: copy)
            print("\(lib.path)")
        }
        if failures > 0 {
            FileHandle.standardError.write(Data("\(failures) files failed\n".utf8))
            throw ExitCode.failure
        }
    }
}

/// Runs /usr/bin/xcrun with `arguments`; returns its exit status.
func xcrun(_ arguments: [String], quiet: Bool = false) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/xcrun")
    process.arguments = arguments
    if quiet {
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
    }
    do {
        try process.run()
    } catch {
        return -1
    }
    process.waitUntilExit()
    return process.terminationStatus
}
