"""The report commands' options that choose the measurement read of each run (measurement.py), shared by
`python -m vit_locality.report` and its summary so both read a run alike."""

from __future__ import annotations

import argparse

from vit_locality.report.load.measurement import PAPER, MeasurementChoice


def _positive(text: str) -> int:
    """An integer >= 1, or argparse's one-line refusal."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not an integer >= 1")
    return value


def add_measurement_options(parser: argparse.ArgumentParser) -> None:
    """--probe-size, --raw-attention and --early-layers, with what each asks."""
    group = parser.add_argument_group(
        "measurement read",
        "each run counts once, read in one of its final measurements: by default the paper's (renormalised, "
        f"{PAPER.probe_size} probe images preferred, first {PAPER.early_layers} layers); a setting given here must "
        "match, and a run without such a measurement keeps its accuracy only (a note says how to measure it)",
    )
    group.add_argument(
        "--probe-size",
        type=_positive,
        metavar="N",
        help="the measurement on N probe images (stats.probe_size=N; a split of fewer images: all of them)",
    )
    group.add_argument(
        "--raw-attention",
        action="store_true",
        help="the measurement of raw attention weights (stats.renormalize=false); the claims call it not comparable",
    )
    group.add_argument(
        "--early-layers",
        type=_positive,
        metavar="N",
        help="the measurement whose headline figures are over the first N layers (stats.early_layers=N)",
    )


def measurement_choice(args: argparse.Namespace) -> MeasurementChoice:
    """The measurement the parsed options ask for."""
    return MeasurementChoice.from_options(args.raw_attention, args.probe_size, args.early_layers)
