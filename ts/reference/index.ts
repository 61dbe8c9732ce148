// The CPU references of every family: plain loops, float64 accumulation.
// Import as 'mlx-native/reference' (parity suites compare kernels against them).
//
// Each family's reference lives beside its op, at the end of
// ts/ops/<family>.ts (the section "the float64 reference"); its names end in
// Ref (l2NormRef, ggmlMatmulIdRef), beside a few helpers of the formats
// (affineQuantize, ggmlQuantize, ropeAngle). This entry re-exports the ops
// index, so 'mlx-native/reference' and 'mlx-native/ops' are one module graph.

export * from '../ops/index.ts';
