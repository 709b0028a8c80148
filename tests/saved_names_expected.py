# ruff: noqa: E501
"""Identity hashes and run directory names of tests/saved_names.py's cells, as the code computed them when they were
saved (rewritten by `python tests/saved_names.py` only when a change of names is intended)."""

SAVED = [
    {"overrides": [], "identity_hash": "1f5bc7ab92c15027", "name": "cifar100_vit_paper_aa1_cm1_ls0.1_s0"},
    {
        "overrides": ["data=synthetic"],
        "identity_hash": "3088286157b7eb31",
        "name": "synthetic_vit_paper_aa1_cm1_ls0.1_s0",
    },
    {"overrides": ["data=glyphs"], "identity_hash": "62bdcaf38452b993", "name": "glyphs_vit_paper_aa1_cm1_ls0.1_s0"},
    {"overrides": ["data=cifar10"], "identity_hash": "f49ea76a366d94f0", "name": "cifar10_vit_paper_aa1_cm1_ls0.1_s0"},
    {
        "overrides": ["data=synthetic", "model=vit_tiny"],
        "identity_hash": "e556a4ea8f7c4363",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=glyphs", "model=vit_tiny_sincos"],
        "identity_hash": "4152035ee48459da",
        "name": "glyphs_vit_tiny_sincos_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=cifar10", "model=vit_convstem"],
        "identity_hash": "fc0750cebeb96a14",
        "name": "cifar10_vit_convstem_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_convstem"],
        "identity_hash": "3c4f670019898720",
        "name": "synthetic_vit_convstem_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["experiment=demo"],
        "identity_hash": "5910bafe4907ae45",
        "name": "glyphs_vit_tiny_sincos_aa1_cm1_ls0.1_s0_data.batch_size-32_data.train_size-4000_optim.lr-0.002_hash-ebde589a3c",
    },
    {
        "overrides": ["experiment=demo", "aug.cutmix=true", "loss.ls=0.1"],
        "identity_hash": "5910bafe4907ae45",
        "name": "glyphs_vit_tiny_sincos_aa1_cm1_ls0.1_s0_data.batch_size-32_data.train_size-4000_optim.lr-0.002_hash-ebde589a3c",
    },
    {
        "overrides": ["experiment=demo_textures"],
        "identity_hash": "4fdb88517c40b86c",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_data.train_size-4000_optim.lr-0.003_optim.warmup_epochs-1_trainer.max_epochs-10",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "protocol=baseline"],
        "identity_hash": "7b2185fd213aa6cb",
        "name": "synthetic_vit_tiny_aa0_cm0_ls0_s0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "optim.lr=3e-3"],
        "identity_hash": "d48e8a6cd7ac4193",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_optim.lr-0.003",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "optim.lr=0.003"],
        "identity_hash": "d48e8a6cd7ac4193",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_optim.lr-0.003",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "model.mlp_ratio=2"],
        "identity_hash": "e556a4ea8f7c4363",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "model.mlp_ratio=2.0"],
        "identity_hash": "e556a4ea8f7c4363",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "model.mlp_ratio=3"],
        "identity_hash": "624a86ac72313e86",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_model.mlp_ratio-3.0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "trainer.devices=2"],
        "identity_hash": "c69f794f6911edd7",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_processes-2",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "trainer.limit_train_batches=1"],
        "identity_hash": "2a63ca9e88d8346c",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_trainer.limit_train_batches-1",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "trainer.limit_train_batches=0.5"],
        "identity_hash": "ee3fa886d28d968a",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_trainer.limit_train_batches-0.5",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "protocol=baseline", "aug.mixup=true", "aug.cutmix=false"],
        "identity_hash": "6cd287608abb4f8d",
        "name": "synthetic_vit_tiny_aa0_cm0_ls0_s0_aug.mixup-true",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "stats.units=grid"],
        "identity_hash": "e556a4ea8f7c4363",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "loss.ls=0.10"],
        "identity_hash": "e556a4ea8f7c4363",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "seed=3", "tags=[a,b]", "threads=2"],
        "identity_hash": "9e81e7eb3c7d8d18",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s3",
    },
    {
        "overrides": [
            "data=synthetic",
            "model=vit_tiny",
            "data.num_workers=0",
            "trainer.accelerator=cpu",
            "logger=wandb",
        ],
        "identity_hash": "e556a4ea8f7c4363",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0",
    },
    {
        "overrides": [
            "data=synthetic",
            "model=vit_tiny",
            "aug.policy=cifar10",
            "aug.cutmix_alpha=0.8",
            "aug.cutmix_prob=0.5",
            "optim.betas=[0.9,0.95]",
        ],
        "identity_hash": "66a5cf062b822eb9",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_aug.cutmix_alpha-0.8_aug.cutmix_prob-0.5_aug.policy-cifar10_optim.betas-0.9_0.95",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "data.val_size=500", "optimized_metric=val/acc1"],
        "identity_hash": "71369fb691a1e4a3",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_data.val_size-500",
    },
    {
        "overrides": ["data=synthetic", "model=vit_tiny", "+trainer.max_steps=10", "trainer.gradient_clip_val=1.0"],
        "identity_hash": "b70a50f0d5c492de",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_trainer.gradient_clip_val-1.0_trainer.max_steps-10",
    },
    {
        "overrides": [
            "data=synthetic",
            "model=vit_tiny",
            "optim.lr=0.002",
            "optim.weight_decay=0.1",
            "optim.warmup_epochs=2",
            "optim.min_lr_ratio=0.01",
            "aug.cutmix_alpha=0.8",
            "data.noise=0.1",
            "data.split_seed=1",
            "trainer.max_epochs=3",
        ],
        "identity_hash": "725a41d4f07503f4",
        "name": "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_aug.cutmix_alpha-0.8_data.noise-0.1_data.split_seed-1_optim.lr-0.002_hash-770c8cc141",
    },
    {
        "overrides": [
            "data=glyphs",
            "model=vit_tiny_sincos",
            "model.pos_init=learned",
            "data.clutter=2",
            "stats.early_layers=1",
        ],
        "identity_hash": "10ff7e5c5c348b9e",
        "name": "glyphs_vit_tiny_sincos_aa1_cm1_ls0.1_s0_data.clutter-2_model.pos_init-learned_stats.early_layers-1",
    },
]
