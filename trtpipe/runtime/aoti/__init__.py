"""AOTInductor packages (.pt2): torch.export graphs compiled ahead of time by Inductor, run without the model's
Python code; loaded only when their manifest vouches for them (package.py), replayed from CUDA graphs on a GPU
(graphs.py)."""
