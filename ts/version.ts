// The package version (tests/package.test.ts holds it equal to package.json's):
// libraries built from source go to a per-user directory keyed by it.
export const VERSION = '0.1.0';
