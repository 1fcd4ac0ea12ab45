"""ONNX ops that select elements by their values, so their output length depends on the values: NonMaxSuppression
and Unique.

Each runs in two steps. NonMaxSuppression: fusegrad computes every pair's overlap test for all boxes at once (a
(batch, boxes, boxes) boolean tensor), then the greedy walk through the boxes by score, which is sequential, runs in
Python on those values. Unique: the distinct values (or slices) are found in Python from the input's values, and
the output gathers them from the input with fusegrad. Registered on import.
"""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import normalize_axis, onnx_op, scalar, static
from fusegrad.tensor import Tensor


def box_edges(boxes: Tensor, center_point_box: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x_min, y_min, x_max, y_max), each (batch, boxes), of [y1, x1, y2, x2] corners (either diagonal) or, with
    center_point_box=1, [x_center, y_center, width, height] boxes."""
    if center_point_box:
        x, y, half_w, half_h = boxes[..., 0], boxes[..., 1], boxes[..., 2] / 2, boxes[..., 3] / 2
        return x - half_w, y - half_h, x + half_w, y + half_h
    y1, x1, y2, x2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return x1.minimum(x2), y1.minimum(y2), x1.maximum(x2), y1.maximum(y2)


def suppression_matrix(boxes: Tensor, center_point_box: int, iou_threshold: float) -> Tensor:
    """(batch, boxes, boxes) bool: whether box i suppresses box j (their intersection over union is above the
    threshold; boxes that do not overlap or have no area never do)."""
    x_min, y_min, x_max, y_max = box_edges(boxes.cast(dtypes.float32), center_point_box)
    area = (x_max - x_min) * (y_max - y_min)  # (B, N)

    def pairwise(edge: Tensor) -> tuple[Tensor, Tensor]:
        return edge.unsqueeze(2), edge.unsqueeze(1)  # (B, N, 1) against (B, 1, N)

    inter_w = pairwise(x_max)[0].minimum(pairwise(x_max)[1]) - pairwise(x_min)[0].maximum(pairwise(x_min)[1])
    inter_h = pairwise(y_max)[0].minimum(pairwise(y_max)[1]) - pairwise(y_min)[0].maximum(pairwise(y_min)[1])
    intersection = inter_w * inter_h
    area_i, area_j = pairwise(area)
    union = area_i + area_j - intersection
    overlaps = (inter_w > 0) & (inter_h > 0) & (area_i > 0) & (area_j > 0) & (union > 0)
    return overlaps & (intersection / union.maximum(1e-30) > iou_threshold)


def select_boxes(scores: list[float], suppresses: list[list[bool]], limit: int, threshold: float | None) -> list[int]:
    """Greedy NMS for one batch and class: boxes by score (ties: lower index first), each kept unless a kept box
    suppresses it, until `limit` are kept; boxes at or below the score threshold (when given) are never candidates."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    for box in order:
        if len(kept) >= limit:
            break
        if threshold is not None and not scores[box] > threshold:
            continue
        if not any(suppresses[other][box] for other in kept):
            kept.append(box)
    return kept


@onnx_op("NonMaxSuppression")
def non_max_suppression(
    boxes: Tensor,
    scores: Tensor,
    max_output_boxes_per_class: Tensor | None = None,
    iou_threshold: Tensor | None = None,
    score_threshold: Tensor | None = None,
    center_point_box: int = 0,
) -> Tensor:
    limit = max(int(scalar(max_output_boxes_per_class, 0)), 0)
    threshold = None if score_threshold is None else float(scalar(score_threshold))
    batches, classes, count = scores.shape
    if limit == 0 or count == 0:
        return Tensor.empty(0, 3, dtype=dtypes.int64)
    matrix = suppression_matrix(boxes, center_point_box, float(scalar(iou_threshold, 0.0)))
    flat_matrix, flat_scores = static(matrix), static(scores.cast(dtypes.float32))
    selected = []
    for batch in range(batches):
        rows = [flat_matrix[(batch * count + i) * count : (batch * count + i + 1) * count] for i in range(count)]
        for cls in range(classes):
            start = (batch * classes + cls) * count
            kept = select_boxes(flat_scores[start : start + count], rows, limit, threshold)
            selected += [[batch, cls, box] for box in kept]
    return Tensor(selected, dtype=dtypes.int64) if selected else Tensor.empty(0, 3, dtype=dtypes.int64)


def distinct_slices(x: Tensor, axis: int | None) -> tuple[list[tuple[float, ...]], int]:
    """The input's values as one tuple per element (axis None) or per slice along axis, and the slice count."""
    # slices compare as the flattened rows with axis moved to the front (numpy's order)
    if axis is None:
        moved = x.reshape(-1, 1)
    else:
        moved = x.permute(axis, *[i for i in range(x.ndim) if i != axis]).reshape(x.shape[axis], -1)
    values, width = static(moved), moved.shape[1]
    return [tuple(values[i * width : (i + 1) * width]) for i in range(moved.shape[0])], moved.shape[0]


@onnx_op("Unique")
def unique(x: Tensor, axis: int | None = None, sorted: int = 1) -> list[Tensor]:  # noqa: A002  (ONNX's name)
    axis = None if axis is None else normalize_axis(axis, x.ndim)
    slices, count = distinct_slices(x, axis)
    if count == 0:
        return [x.reshape(-1) if axis is None else x, *(Tensor.empty(0, dtype=dtypes.int64) for _ in range(3))]
    first: dict[tuple[float, ...], int] = {}
    for i, key in enumerate(slices):
        first.setdefault(key, i)
    keys = sorted_keys(first, bool(sorted))
    position = {key: rank for rank, key in enumerate(keys)}
    indices = [first[key] for key in keys]
    inverse = [position[key] for key in slices]
    counts = [0] * len(keys)
    for rank in inverse:
        counts[rank] += 1
    index = Tensor(indices, dtype=dtypes.int64)
    y = x.reshape(-1)[index] if axis is None else x[(slice(None),) * axis + (index,)]
    return [y, *(Tensor(v, dtype=dtypes.int64) for v in (indices, inverse, counts))]


def sorted_keys(first: dict[tuple[float, ...], int], ascending: bool) -> list[tuple[float, ...]]:
    """The distinct keys: ascending (lexicographic for slices) when sorted=1, else in order of first appearance."""
    return sorted(first) if ascending else list(first)
