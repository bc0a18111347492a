"""INT8 calibration: each tensor's range from the calibration samples (calibrate), the range cache (cache), and per-
channel saturation intervals (saturation)."""
