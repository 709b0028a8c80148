"""The protocol's augmentations: per-sample transforms, batch mixing, batched AutoAugment."""
