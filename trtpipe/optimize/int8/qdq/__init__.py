"""Where INT8's Q/DQ go and how they are written: the placement rules (placement), each target's profile (profiles),
the quantizer (quantize), zero points, the integer rewrites (integer_gains, integer_hardswish, concat_in_place),
FP32 fallbacks (keep_fp32) and saturation emulation."""
