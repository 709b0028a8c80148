"""The ViT and the LightningModule that trains it."""
