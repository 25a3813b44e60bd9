"""The 3D U-Net trainer: model, data, training step and loop."""
