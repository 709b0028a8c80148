"""Train one protocol cell, or a sweep of them with `-m` (the checkout's entry point; installed: `vit-locality-train`).

    python train.py                                   # paper ViT, Modern protocol, CIFAR-100
    python train.py data=synthetic model=vit_tiny trainer.max_epochs=1
    python train.py -m aug.cutmix=true,false aug.autoaug=true,false loss.ls=0,0.1   # the 8-cell ablation

The configs live in vit_locality/conf/; `python train.py --help` lists the groups.
Exit statuses: docs/troubleshooting.md.
"""

from vit_locality.train import cli

if __name__ == "__main__":
    cli()
