"""The demo's glyph set: seeded, balanced, uint8; no single patch gives the class away, the whole image does, and
the protocol's colour operations and flip keep the label."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import compose_config
from torchvision.transforms.v2 import functional as TF

from vit_locality.data.glyphs import CLASS_SEGMENTS, GlyphsDataModule, generate_glyphs, mirrored
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from

# Larger glyphs than the demo's (0.6-0.8 of the side), so that a linear classifier of the whole image has more to
# read: the control that shows the single-patch test can tell a giveaway from a weak classifier.
SETTINGS = dict(num_classes=10, image_size=32, min_height=0.7, max_height=0.9, clutter=0, noise=0.05)


def _draw(count: int, split: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    return generate_glyphs(count, seed=seed, split_offset=split, **SETTINGS)


def ink_map(images: torch.Tensor) -> torch.Tensor:
    """Where the strokes are, whatever their colour or polarity: |grey - the image's median| / its spread. A fixed
    descriptor that knows nothing of the generator."""
    grey = images.float().mean(1)
    flat = grey.flatten(1)
    median = flat.quantile(0.5, dim=1).view(-1, 1, 1)  # interpolated: Invert maps it onto itself
    spread = flat.std(1).view(-1, 1, 1).clamp_min(1e-3)
    return (grey - median).abs() / spread


def inked_patches(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 4 x 4 patch tokens (of the model's 8 x 8 grid) that hold part of a stroke, each with its image's label:
    the token's ink map (16 values, its shape) and its RGB pixels (48 values, its colour)."""
    ink = ink_map(images).unfold(1, 4, 4).unfold(2, 4, 4).reshape(len(images), 64, 16)
    rgb = images.float().div(255).unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 1, 4, 5).reshape(len(images), 64, 48)
    keep = ink.amax(-1) > 2.0
    return torch.cat([ink, rgb], -1)[keep], labels.view(-1, 1).expand(-1, 64)[keep]


def fit_softmax(train_x: torch.Tensor, train_y: torch.Tensor) -> torch.nn.Linear:
    """Multinomial logistic regression (full-batch L-BFGS on standardised features)."""
    torch.manual_seed(0)
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    linear = torch.nn.Linear(train_x.shape[1], 10)
    torch.nn.init.zeros_(linear.weight)
    optimiser = torch.optim.LBFGS(linear.parameters(), max_iter=100)
    inputs = (train_x - mean) / std

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = F.cross_entropy(linear(inputs), train_y) + 1e-3 * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    optimiser.step(closure)
    with torch.no_grad():  # fold the standardisation into the layer
        linear.weight /= std
        linear.bias -= linear.weight @ mean
    return linear


def accuracy(model: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


@pytest.fixture(scope="module")
def splits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    train_x, train_y = _draw(500, split=1)
    test_x, test_y = _draw(250, split=2)
    return train_x, train_y, test_x, test_y


@pytest.fixture(scope="module")
def whole_image_model(splits: tuple[torch.Tensor, ...]) -> torch.nn.Linear:
    train_x, train_y, _, _ = splits
    return fit_softmax(ink_map(train_x).flatten(1), train_y)


def test_seeded_balanced_uint8() -> None:
    images, labels = _draw(50, split=1)
    again, again_labels = _draw(50, split=1)
    assert images.dtype == torch.uint8 and images.shape == (50, 3, 32, 32)
    assert torch.equal(images, again) and torch.equal(labels, again_labels)
    assert not torch.equal(images, _draw(50, split=2)[0])  # the splits differ
    assert not torch.equal(images, _draw(50, split=1, seed=1)[0])  # so do the seeds
    assert torch.bincount(labels, minlength=10).tolist() == [5] * 10


def test_both_polarities_in_every_class(splits: tuple[torch.Tensor, ...]) -> None:
    """Light glyphs on dark ground and dark on light, about half each in every class: what makes Invert keep the
    label."""
    train_x, train_y, _, _ = splits
    grey = train_x.float().mean(1)
    ink = ink_map(train_x) > 2.0
    median = grey.flatten(1).quantile(0.5, dim=1)
    lighter = torch.stack([grey[k][ink[k]].mean() > median[k] for k in range(len(grey))])
    for label in range(10):
        assert 0.3 <= float(lighter[train_y == label].float().mean()) <= 0.7, label


def test_the_datamodule_names_its_classes_and_sizes() -> None:
    arrays = GlyphsDataModule(train_size=30, test_size=20, num_classes=4, batch_size=8).load_arrays()
    assert arrays.train_images.shape == (30, 3, 32, 32) and arrays.test_images.shape == (20, 3, 32, 32)
    assert arrays.class_names == ["-", "0", "1", "2"]
    assert set(arrays.train_labels.tolist()) == {0, 1, 2, 3}


def test_no_class_is_another_ones_mirror_image() -> None:
    """The training flip always runs: a class whose mirror image were another class would have its label flipped."""
    sets = {"".join(sorted(segments)) for segments in CLASS_SEGMENTS.values()}
    assert len(sets) == len(CLASS_SEGMENTS)
    for name, segments in CLASS_SEGMENTS.items():
        others = sets - {"".join(sorted(segments))}
        assert mirrored(segments) not in others, name
    assert mirrored("abdeg") == "acdfg"  # 2 mirrored is 5, which is why 5 is not a class


def test_every_two_classes_differ_in_two_segments_even_mirrored() -> None:
    """Half the training images are flipped, so each class is its glyph or its mirror image: no two classes may
    come within one segment of each other in any of those forms (0 and 8 would)."""
    forms = {name: {frozenset(segments), frozenset(mirrored(segments))} for name, segments in CLASS_SEGMENTS.items()}
    names = list(forms)
    closest = min(len(a ^ b) for i, x in enumerate(names) for y in names[i + 1 :] for a in forms[x] for b in forms[y])
    assert closest == 2


def test_a_single_patch_does_not_give_the_class_away(
    splits: tuple[torch.Tensor, ...], whole_image_model: torch.nn.Linear
) -> None:
    """A patch that holds a stroke piece classifies at most at twice chance (0.17 measured); the same classifier on
    the whole image does far better (0.97), so the test can tell a giveaway from a weak classifier."""
    train_x, train_y, test_x, test_y = splits
    patch_model = fit_softmax(*inked_patches(train_x, train_y))
    assert accuracy(patch_model, *inked_patches(test_x, test_y)) <= 0.2
    assert accuracy(whole_image_model, ink_map(test_x).flatten(1), test_y) >= 0.6


def test_a_single_patch_does_not_give_the_class_away_at_the_demos_sizes() -> None:
    """The same at the demo's own glyph sizes (GlyphsDataModule's defaults are conf/data/glyphs.yaml's): 0.15."""
    settings = {**GlyphsDataModule(batch_size=8).generation, "split_offset": 1}
    train_x, train_y = generate_glyphs(500, **settings)
    test_x, test_y = generate_glyphs(250, **{**settings, "split_offset": 2})
    patch_model = fit_softmax(*inked_patches(train_x, train_y))
    assert accuracy(patch_model, *inked_patches(test_x, test_y)) <= 0.2


def test_colour_operations_and_the_flip_keep_the_class(
    splits: tuple[torch.Tensor, ...], whole_image_model: torch.nn.Linear
) -> None:
    """Polarity and colour are random per image, so Invert, Posterize and greyscale leave the glyph where it was:
    the whole-image classifier reads the same class (the flip: test_no_class_is_another_ones_mirror_image)."""
    _, _, test_x, test_y = splits
    descriptor = ink_map(test_x).flatten(1)
    inverted = ink_map(TF.invert(test_x)).flatten(1)
    agree = whole_image_model(inverted).argmax(1) == whole_image_model(descriptor).argmax(1)
    assert float(agree.float().mean()) >= 0.99
    clean = accuracy(whole_image_model, descriptor, test_y)
    for operation in (lambda x: TF.posterize(x, 3), lambda x: TF.rgb_to_grayscale(x, 3)):
        assert accuracy(whole_image_model, ink_map(operation(test_x)).flatten(1), test_y) >= clean - 0.06
    polarity = ink_map(test_x).mean((1, 2)) - ink_map(TF.invert(test_x)).mean((1, 2))
    assert polarity.abs().max() < 0.05  # the descriptor is blind to polarity, as the set's labels are


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["data.num_classes=11"], "data.num_classes"),
        (["data.min_height=0.9", "data.max_height=0.8"], "data.max_height"),
        (["data.clutter=-1"], "data.clutter"),
        (["data.noise=-0.1"], "data.noise"),
    ],
)
def test_bad_glyph_settings_name_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from(compose_config(["data=glyphs", *overrides]))
    assert str(caught.value).startswith(f"{key}=")


def test_the_glyph_config_validates_and_matches_the_datamodule_defaults() -> None:
    cfg = compose_config(["data=glyphs"])
    settings_from(cfg)
    defaults = GlyphsDataModule(batch_size=8).generation
    assert {key: cfg.data[key if key != "seed" else "generator_seed"] for key in defaults} == defaults
