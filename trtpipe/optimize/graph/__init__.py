"""Graph helpers the passes and INT8 share, which never import a pass (an import-linter contract): rewrites fuse runs,
what FP16 cannot hold, the channel gains, opset upgrades, shape arithmetic, the dynamic batch, activation feeds."""
