// Errors of every layer (validation, loader, native calls) are MlxError, with
// a kind that mirrors the Rust crate's MlxError and the C ABI's status codes.

export type MlxErrorKind =
  | 'InvalidArgument'
  | 'ShaderCompilationError'
  | 'KernelNotFound'
  | 'DeviceNotFound'
  | 'CommandBufferError'
  | 'BufferAllocationError'
  | 'UnsupportedDtype'
  // A backend's own failure (MLXN_ERR_INTERNAL): a bug in the backend, never
  // the caller's input.
  | 'Internal';

export class MlxError extends Error {
  readonly kind: MlxErrorKind;

  constructor(kind: MlxErrorKind, message: string) {
    super(message);
    this.name = 'MlxError';
    this.kind = kind;
  }
}

// Index = the header's MLXN_ERR_* value.
const STATUS_KINDS: readonly MlxErrorKind[] = [
  'Internal', // 0 is MLXN_OK and never mapped; listed to keep the indices aligned
  'InvalidArgument',
  'ShaderCompilationError',
  'KernelNotFound',
  'DeviceNotFound',
  'CommandBufferError',
  'BufferAllocationError',
  'UnsupportedDtype',
  'Internal',
];

/** The error kind of a non-zero mlxn_status; unknown codes are 'Internal'. */
export function statusKind(status: number): MlxErrorKind {
  return (status > 0 && status < STATUS_KINDS.length ? STATUS_KINDS[status] : undefined) ?? 'Internal';
}
