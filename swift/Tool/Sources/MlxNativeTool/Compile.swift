// `mlx-native compile`: compiles every family's program through the library, as
// the TypeScript registry does at run time, and makes a pipeline of every
// kernel that needs no function constant. Exits non-zero on any error.
import ArgumentParser
import Foundation
import Metal
import MlxNative

struct Compile: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compile every .metal file of a shaders directory from source and build its pipelines.")

    @Argument(help: "The shaders directory.")
    var shaders: String = "shaders"

    func run() throws {
        let device: MetalDevice
        do {
            device = try MetalDevice(ordinal: 0)
        } catch let error as MlxnError {
            throw ValidationError(error.message)
        }
        let families = try metalFamilies(in: shaders)
        guard !families.isEmpty else { throw ValidationError("no .metal files in \(shaders)") }
        var failures = 0
        var kernelCount = 0
        for family in families {
            // Errors cite each file of the program by the name of its `#line` directive.
            let name = family.file.lastPathComponent
            let source = family.source
            let start = Date()
            let library: MetalLibrary
            do {
                library = try MetalLibrary(device: device, source: source, name: name, constants: [], allowPrecompiled: false)
            } catch let error as MlxnError {
                failures += 1
                FileHandle.standardError.write(Data("error: \(error.message)\n".utf8))
                continue
            }
            let compiled = Date().timeIntervalSince(start)
            var built = 0
            var skipped: [String] = []
            for kernel in library.kernelNames {
                kernelCount += 1
                // A kernel with a required function constant has no pipeline
                // until the caller gives its value.
                if let function = library.library.makeFunction(name: kernel),
                   function.functionConstantsDictionary.values.contains(where: { $0.required }) {
                    skipped.append(kernel)
                    continue
                }
                do {
                    _ = try library.pipeline(kernel)
                    built += 1
                } catch let error as MlxnError {
                    failures += 1
                    FileHandle.standardError.write(Data("error: \(error.message)\n".utf8))
                }
            }
            let total = Date().timeIntervalSince(start)
            let note = skipped.isEmpty ? "" : ", skipped (required function constants): \(skipped.joined(separator: " "))"
            print("\(name): compiled in \(ms(compiled)), \(built) pipelines in \(ms(total - compiled))\(note)")
        }
        print("\(families.count) families, \(kernelCount) kernels, \(failures) errors")
        if failures > 0 { throw ExitCode.failure }
    }
}

func ms(_ seconds: TimeInterval) -> String {
    String(format: "%.1f ms", seconds * 1000)
}
