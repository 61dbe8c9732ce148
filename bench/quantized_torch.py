# MLX's affine quantization in torch, for the peers of the quantized rows
# (bench/matmul_peers.py, bench/glue_peers.py): packed int32 rows, value i of
# a row at bit i * bits (ts/ops/quantized_matmul.ts writes the format down),
# w = scales * q + biases per group of gs values along k.
import torch


def dequantize(wq, scales, biases, bits, gs):
    """w [n, k] in the scales' dtype from MLX's packed int32 rows [n, k * bits / 32]."""
    n = wq.shape[0]
    if bits == 6:
        b = wq.view(torch.uint8).reshape(n, -1, 3).to(torch.int32)
        t = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
        q = (t.unsqueeze(-1) >> torch.tensor([0, 6, 12, 18], device=wq.device, dtype=torch.int32)) & 63
    else:
        shifts = torch.arange(0, 32, bits, device=wq.device, dtype=torch.int32)
        q = (wq.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    q = q.reshape(n, -1, gs).to(scales.dtype)
    return (q * scales.unsqueeze(-1) + biases.unsqueeze(-1)).reshape(n, -1)


def random_affine(n, k, bits, gs, dtype, device):
    """Random packed words (any bits are valid q) with scales in [-0.02, 0.02) and biases in [-0.1, 0.1)."""
    wq = torch.randint(-2**31, 2**31 - 1, (n, k * bits // 32), dtype=torch.int32, device=device)
    scales = (torch.rand(n, k // gs, dtype=dtype, device=device) - 0.5) * 0.04
    biases = (torch.rand(n, k // gs, dtype=dtype, device=device) - 0.5) * 0.2
    return wq, scales, biases
