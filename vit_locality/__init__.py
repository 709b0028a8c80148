"""vit-locality: train compact ViTs under composable protocol flags and measure attention locality."""

__version__ = "0.1.0"
