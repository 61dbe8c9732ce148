// SwiftPM builds a C target only when it has a source file; this one also
// checks, at compile time, that the headers parse as C (mlx_native_block.h's
// decoder included) and that the dispatch block sizes the Swift code relies on
// are the ones the header states.
#include "mlx_native.h"
#include "mlx_native_block.h"

_Static_assert(MLXN_DISPATCH_HEADER_BYTES == 48u, "dispatch header is 48 bytes");
_Static_assert(MLXN_DISPATCH_BINDING_BYTES == 24u, "binding record is 24 bytes");
_Static_assert(sizeof(mlxn_status) == 4, "mlxn_status is 32-bit");
