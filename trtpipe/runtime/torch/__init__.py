"""PyTorch eager: the FP32 baseline every artifact is verified and measured against."""
