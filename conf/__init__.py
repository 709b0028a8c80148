"""The Hydra configs, a package so that Hydra finds them inside an installed wheel (pkg://vit_locality.conf)."""
