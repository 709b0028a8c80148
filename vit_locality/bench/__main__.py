"""`python -m vit_locality.bench` (installed: `vit-locality-bench`): the whole suite (see suite.py);
`python -m vit_locality.bench gpu`: the GPU bench (see gpu.py)."""

import sys


def cli() -> None:
    """The suite, or the GPU bench when the first argument is `gpu`; the figures go to files, not the exit status."""
    if sys.argv[1:2] == ["gpu"]:
        from vit_locality.bench.gpu import main as gpu_main

        gpu_main(sys.argv[2:])
    else:
        from vit_locality.bench.suite import main

        main()


if __name__ == "__main__":
    cli()
