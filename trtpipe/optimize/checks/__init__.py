"""The checks on a written file: each said in one line and kept in the manifest (written), it loads in each runtime's
default session (loads), which convolutions run integer kernels (kernels), a short paired timing against FP32
(speed_check)."""
