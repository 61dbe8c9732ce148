# GGUF's block formats in torch, for the peers of the quantized_matmul_ggml
# rows (bench/matmul_peers.py, bench/glue_peers.py): the layouts of
# ts/ops/quantized_matmul_ggml.ts (llama.cpp's ggml-common.h), dequantized
# with whole-tensor operations, and random blocks to time them on.
import torch

QK = {"Q4_0": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}
BLOCK_BYTES = {"Q4_0": 18, "Q8_0": 34, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}


def row_bytes(t, k):
    return k // QK[t] * BLOCK_BYTES[t]


def _f16(b, at):
    """The f16 at byte `at` of every block (b: uint8 [blocks, bytes]), as f32 [blocks, 1]."""
    return b[:, at:at + 2].contiguous().view(torch.float16).float()


def _scale_min_k4(s):
    """The 8 six-bit scales and mins of Q4_K / Q5_K super-blocks from their 12 bytes (int32 [blocks, 12])."""
    sc = torch.cat([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], dim=1)
    m = torch.cat([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], dim=1)
    return sc.float(), m.float()


def dequantize_blocks(b, t):
    """Blocks b (uint8 [blocks, BLOCK_BYTES[t]]) of format t as f32 [blocks, QK[t]]."""
    nb = b.shape[0]
    if t == "Q4_0":
        qs = b[:, 2:18].to(torch.int32)
        q = torch.cat([qs & 15, qs >> 4], dim=1) - 8
        return _f16(b, 0) * q
    if t == "Q8_0":
        return _f16(b, 0) * b[:, 2:34].contiguous().view(torch.int8).float()
    if t in ("Q4_K", "Q5_K"):
        sc, m = _scale_min_k4(b[:, 4:16].to(torch.int32))
        at = 48 if t == "Q5_K" else 16
        qs = b[:, at:at + 128].to(torch.int32).view(nb, 4, 1, 32)
        q = torch.cat([qs & 15, qs >> 4], dim=2).view(nb, 8, 32)  # sub-block 2c + nibble
        if t == "Q5_K":
            qh = b[:, 16:48].to(torch.int32).view(nb, 1, 32)
            q = q | (((qh >> torch.arange(8, device=b.device, dtype=torch.int32).view(1, 8, 1)) & 1) << 4)
        w = (_f16(b, 0) * sc).unsqueeze(-1) * q - (_f16(b, 2) * m).unsqueeze(-1)
        return w.reshape(nb, 256)
    if t == "Q6_K":
        ql = b[:, 0:128].to(torch.int32).view(nb, 2, 1, 2, 32)  # [half, nibble, ql[l] or ql[l + 32], l]
        lo = torch.cat([ql & 15, ql >> 4], dim=2).view(nb, 2, 4, 32)  # p = 2 nibble + (p % 2)
        qh = b[:, 128:192].to(torch.int32).view(nb, 2, 1, 32)
        hi = (qh >> (2 * torch.arange(4, device=b.device, dtype=torch.int32).view(1, 1, 4, 1))) & 3
        q = ((lo | (hi << 4)) - 32).reshape(nb, 256)
        sc = b[:, 192:208].contiguous().view(torch.int8).float().repeat_interleave(16, dim=1)
        return _f16(b, 208) * sc * q
    raise ValueError(f"no dequantization for {t}")


def dequantize(raw, t, k, dtype=torch.bfloat16):
    """A tensor of rows of blocks (uint8 [rows, row_bytes(t, k)]) as dtype [rows, k]."""
    rows = raw.shape[0]
    w = dequantize_blocks(raw.reshape(-1, BLOCK_BYTES[t]), t)
    return w.reshape(rows, k).to(dtype)


def random_blocks(t, rows, k, device):
    """Random rows of blocks: random bytes, every f16 scale (d, and dmin for Q4_K / Q5_K) 0.01."""
    b = torch.randint(0, 256, (rows * k // QK[t], BLOCK_BYTES[t]), dtype=torch.uint8, device=device)
    d = torch.tensor([0.01], dtype=torch.float16, device=device).view(torch.uint8)
    at = 208 if t == "Q6_K" else 0
    b[:, at:at + 2] = d
    if t in ("Q4_K", "Q5_K"):
        b[:, 2:4] = d
    return b.view(rows, row_bytes(t, k))
