"""`python -m vit_locality.bench`: the whole suite (see suite.py); `python -m vit_locality.bench gpu`: the GPU bench
(see gpu.py)."""

import sys

if sys.argv[1:2] == ["gpu"]:
    from .gpu import main as gpu_main

    gpu_main(sys.argv[2:])
else:
    from .suite import main

    main()
