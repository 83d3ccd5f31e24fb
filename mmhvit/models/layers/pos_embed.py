from typing import Tuple

import torch

from .export import is_exporting

# PyTorch's bicubic kernel (Keys' cubic convolution, a = -0.75).
CUBIC_A = -0.75


def resize_pos_map(pos: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """Resize a (1, C, h, w) position-embedding map to ``size`` (bicubic); unchanged if it fits.

    The resize is ``F.interpolate(mode='bicubic', align_corners=False)`` written as two matrix
    products (:func:`bicubic_matrix`; equal up to rounding): on the CPU they are faster than
    PyTorch's bicubic kernel and far faster than its backward, which PyramidTNT's attention bias
    takes on every training step at detection sizes (docs/benchmarks.md), and exported they
    spare ONNX Runtime's cubic ``Resize`` (30% of NesT-T's time at 800 x 1344).
    """
    # An exported graph must resize at every input size, the traced one included.
    if not is_exporting() and tuple(pos.shape[-2:]) == tuple(size):
        return pos
    rows, cols = (bicubic_matrix(n_in, n_out, pos.dtype, pos.device)
                  for n_in, n_out in zip(pos.shape[-2:], size))
    return rows @ pos @ cols.transpose(0, 1)


def bicubic_matrix(n_in: int, n_out, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(n_out, n_in): one axis of ``F.interpolate(mode='bicubic', align_corners=False)`` as a
    matrix; ``n_out`` may be a size traced as a tensor. Source positions are half-pixel centred
    and not clamped, the four taps' indices are clamped to the border (PyTorch's rules).
    Computed in at least float32: half / bfloat16 cannot hold the source positions of a large
    grid (bfloat16 has no 167.5)."""
    out_dtype, dtype = dtype, torch.promote_types(dtype, torch.float32)
    src = (torch.arange(n_out, device=device).to(dtype) + 0.5) * (n_in / n_out) - 0.5
    start = src.floor()
    t = (src - start)[:, None]
    weights = torch.cat([
        cubic_far(t + 1),
        cubic_near(t),
        cubic_near(1 - t),
        cubic_far(2 - t),
    ], dim=1)  # taps start - 1 .. start + 2
    taps = (start[:, None] + torch.arange(-1, 3, device=device).to(dtype)).clamp(0, n_in - 1)
    onehot = taps[:, :, None] == torch.arange(n_in, device=device).to(dtype)
    return (weights[:, :, None] * onehot.to(dtype)).sum(dim=1).to(out_dtype)


def cubic_near(x: torch.Tensor) -> torch.Tensor:
    """Keys' kernel for |x| <= 1."""
    return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1


def cubic_far(x: torch.Tensor) -> torch.Tensor:
    """Keys' kernel for 1 < |x| < 2."""
    return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A


def resize_attn_bias(bias: torch.Tensor, query_grid: Tuple[int, int], key_grid: Tuple[int, int],
                     new_query_grid: Tuple[int, int],
                     new_key_grid: Tuple[int, int]) -> torch.Tensor:
    """Resize a learned (1, heads, h * w, hk * wk) attention bias to other token grids.

    The bias between queries on an h x w grid and keys on an hk x wk grid (both row-major) is read
    as a 4-D map (query row, query column, key row, key column) and resized bicubically along
    each axis with :func:`resize_pos_map`: the query axes, then the key axes (the interpolation
    is separable, so the order changes only rounding). A query keeps the bias it had to a key at
    the same place in the image, interpolated between the positions the table was learned at.
    The bias is returned unchanged when the grids are its own (exact at the pre-training size).
    """
    if not is_exporting() and (tuple(query_grid), tuple(key_grid)) == (tuple(new_query_grid),
                                                                       tuple(new_key_grid)):
        return bias
    heads = bias.shape[1]
    (rows, cols), (key_rows, key_cols) = query_grid, key_grid
    new_rows, new_cols = new_query_grid
    x = bias.reshape(heads, rows, cols, key_rows * key_cols).permute(0, 3, 1, 2)
    x = resize_pos_map(x.reshape(1, -1, rows, cols), new_query_grid)
    x = x.reshape(heads, key_rows, key_cols, new_rows * new_cols).permute(0, 3, 1, 2)
    # Last, the largest step: its output is the (queries x keys) bias, already in that layout.
    x = resize_pos_map(x.reshape(1, -1, key_rows, key_cols), new_key_grid)
    return x.reshape(1, heads, new_rows * new_cols, -1)


class AttnBiasRows:
    """:func:`resize_attn_bias` made a few rows of the new query grid at a time, so that the whole
    (queries x keys) bias never exists at once: iterating gives ``(start, end, bias)`` with
    ``bias`` (1, heads, end - start, keys) for the queries ``start:end`` (whole grid rows, at
    most ``max_queries`` unless one row is longer); :meth:`query_rows` makes any such range.

    Each chunk is resized in :func:`resize_attn_bias`'s order, by the bicubic matrices of
    :func:`bicubic_matrix`: its query rows, its query columns, then the key axes (the learned
    table has few keys, so resizing the queries first is the cheaper order): the same numbers up
    to rounding.
    """

    def __init__(self, bias: torch.Tensor, query_grid: Tuple[int, int],
                 key_grid: Tuple[int, int], new_query_grid: Tuple[int, int],
                 new_key_grid: Tuple[int, int], max_queries: int):
        heads = bias.shape[1]
        self.key_grid = tuple(key_grid)
        self.cols = query_grid[1]
        self.table = bias.reshape(heads, query_grid[0], -1)  # (heads, h, w * keys)
        self.row_matrix, self.col_matrix, self.key_row_matrix, self.key_col_matrix = (
            bicubic_matrix(n_in, n_out, bias.dtype, bias.device)
            for n_in, n_out in zip((*query_grid, *key_grid), (*new_query_grid, *new_key_grid)))
        self.width = new_query_grid[1]
        self.num_queries = self.row_matrix.shape[0] * self.width
        self.step = max(1, max_queries // self.width)

    def __iter__(self):
        grid_rows = self.row_matrix.shape[0]
        for top in range(0, grid_rows, self.step):
            start, end = top * self.width, min(top + self.step, grid_rows) * self.width
            yield start, end, self.query_rows(start, end)

    def query_rows(self, start: int, end: int) -> torch.Tensor:
        """(1, heads, end - start, keys): the bias of the queries ``start:end``, whole grid rows
        (multiples of ``width``, or the end)."""
        heads = self.table.shape[0]
        rows = self._row_matrix(start, end)
        x = (rows @ self.table).reshape(heads, rows.shape[0], self.cols, -1)  # (heads, r, w, keys)
        x = (self.col_matrix @ x).reshape(-1, *self.key_grid)  # (heads * r * W, hk, wk)
        # The key columns first: a product of every query's rows at once, the wider one.
        x = self.key_row_matrix @ (x @ self.key_col_matrix.transpose(0, 1))
        return x.reshape(1, heads, -1, x.shape[-2] * x.shape[-1])

    def table_grad(self, start: int, end: int, grad: torch.Tensor) -> torch.Tensor:
        """The gradient to the table (heads, h, w * keys) of :meth:`query_rows` ``(start, end)``
        given the gradient to its output, (1, heads, end - start, keys), in the gradient's dtype:
        the products transposed in reverse order, with no autograd graph (a backward calls it
        once per query chunk)."""
        heads = self.table.shape[0]
        rows, col, key_row, key_col = (m.to(grad.dtype) for m in (
            self._row_matrix(start, end), self.col_matrix, self.key_row_matrix,
            self.key_col_matrix))
        grad = grad.reshape(-1, key_row.shape[0], key_col.shape[0])
        grad = (key_row.transpose(0, 1) @ grad) @ key_col  # (heads * r * W, hk, wk)
        grad = col.transpose(0, 1) @ grad.reshape(heads, rows.shape[0], self.width, -1)
        return rows.transpose(0, 1) @ grad.reshape(heads, rows.shape[0], -1)

    def _row_matrix(self, start: int, end: int) -> torch.Tensor:
        return self.row_matrix[start // self.width:-(-end // self.width)]

    def whole(self) -> torch.Tensor:
        """The whole (1, heads, queries, keys) bias."""
        return self.query_rows(0, self.num_queries)
