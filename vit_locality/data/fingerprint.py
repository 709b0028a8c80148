"""The data's fingerprint: what a cell trains and is measured on, hashed as read, so equal configs on different
files are told apart (a record's data is compared with the data a rerun reads)."""

from __future__ import annotations

import hashlib
from typing import Any

SPLITS = ("train", "eval", "test")
DATA_PARTS = ("pixels", "labels")


def _as_array(values: Any) -> Any:
    """A tensor or array as a C-contiguous numpy array (hashable by its buffer, without a copy where it is one)."""
    import numpy as np

    array = values.detach().cpu().numpy() if hasattr(values, "detach") else values
    return np.ascontiguousarray(array)


def data_fingerprint(splits: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """What a cell trains and is measured on, split by split: sizes, and sha256 hashes of the uint8 pixels and of the
    labels as read (`splits`: name -> (images, labels), names from SPLITS). Equal configs on different files differ
    here; `data_difference` says which part. `labels_sha256` is computed as records before pixel hashes had it, so
    such a record is still compared on what it holds."""
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
        parts[name] = {
            "pixels": pixel_hashes[id(images)],
            "labels": hashlib.sha256(label_array.tobytes()).hexdigest()[:16],
        }
    return {"sizes": sizes, "labels_sha256": labels_digest.hexdigest()[:16], "sha256": parts}


def data_difference(recorded: Any, current: dict[str, Any]) -> str | None:
    """What differs between a record's data fingerprint and this data's, as a phrase (`the train split's pixels
    differ`), or None when it is the same data. A record without a fingerprint cannot say it is; one written before
    pixels were hashed is compared on its sizes and labels alone; a newer one on every hash it holds."""
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
        for part in DATA_PARTS
        if (parts.get(name) or {}).get(part) != current["sha256"][name][part]
    ]
    if not labels_same and not any(part.endswith("labels") for part in changed):
        # Every part a record holds must match: split hashes that agree do not excuse a labels hash that does not.
        changed.append("the labels of all splits together (labels_sha256)")
    return f"{', '.join(changed)} differ" if changed else None


# A run directory's name stays readable and within what every file system takes (255 bytes a component).
