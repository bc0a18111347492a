"""INT8 post-training quantisation written as Q/DQ nodes: calibration, target profiles, accuracy budget."""
