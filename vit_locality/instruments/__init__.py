"""Instruments that ask why the protocol makes attention local (docs/instruments.md): the position embeddings'
geometry, attention across a pasted CutMix box, locality against accuracy during training, and dose-response
curves. Each is computed from run directories and checkpoints alone; the report draws them."""
