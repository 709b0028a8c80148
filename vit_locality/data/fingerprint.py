"""The data's fingerprint: what a cell trains and is measured on, hashed as read, so equal configs on different
files are told apart."""

from __future__ import annotations

import hashlib
from typing import Any

SPLITS = ("train", "eval", "test")


def _as_array(values: Any) -> Any:
    """A tensor or array as a C-contiguous numpy array."""
    import numpy as np

    array = values.detach().cpu().numpy() if hasattr(values, "detach") else values
    return np.ascontiguousarray(array)


def data_fingerprint(splits: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """Per split (name -> (images, labels)) the size and sha256 prefixes of pixels and labels, plus
    `labels_sha256` over all labels."""
    labels_digest = hashlib.sha256()
    sizes, parts = {}, {}
    pixel_hashes: dict[int, str] = {}  # the evaluation split is often the test set itself: hashed once
    for name in SPLITS:
        images, labels = splits[name]
        label_array = _as_array(labels).astype("int64")
        labels_digest.update(name.encode())
        labels_digest.update(label_array.tobytes())
        sizes[name] = int(len(label_array))
        if id(images) not in pixel_hashes:
            pixel_array = _as_array(images)
            pixels = hashlib.sha256(f"{pixel_array.dtype}{pixel_array.shape}".encode())
            pixels.update(memoryview(pixel_array).cast("B"))
            pixel_hashes[id(images)] = pixels.hexdigest()[:16]
        labels_hash = hashlib.sha256(label_array.tobytes()).hexdigest()[:16]
        parts[name] = {"pixels": pixel_hashes[id(images)], "labels": labels_hash}
    return {"sizes": sizes, "labels_sha256": labels_digest.hexdigest()[:16], "sha256": parts}


def data_difference(recorded: Any, current: dict[str, Any]) -> str | None:
    """What differs between a record's data fingerprint and this data's, as a phrase, or None."""
    if not isinstance(recorded, dict) or not recorded:
        return "its data fingerprint (none) differs from this data's"
    sizes = recorded.get("sizes") or {}
    if sizes != current["sizes"]:
        changed = [name for name in SPLITS if sizes.get(name) != current["sizes"][name]] or list(SPLITS)
        return f"the number of images of the {' and '.join(changed)} split{'s' if len(changed) > 1 else ''} differs"
    parts = recorded.get("sha256")
    labels_same = recorded.get("labels_sha256") == current["labels_sha256"]
    if not isinstance(parts, dict):
        return None if labels_same else "the labels differ (a record without pixel hashes)"
    changed = [
        f"the {name} split's {part}"
        for name in SPLITS
        for part in ("pixels", "labels")
        if (parts.get(name) or {}).get(part) != current["sha256"][name][part]
    ]
    if not labels_same and not any(part.endswith("labels") for part in changed):
        changed.append("the labels of all splits together (labels_sha256)")
    return f"{', '.join(changed)} differ" if changed else None
