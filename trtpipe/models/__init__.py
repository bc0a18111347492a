"""Model sources: the registry of architectures, the bundled trained digits model and its data."""
