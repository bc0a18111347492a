"""Model repositories in Triton's layout: loading one to serve, and exporting one for Triton (``export-triton``)."""
