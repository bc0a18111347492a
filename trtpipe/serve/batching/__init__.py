"""Running a served model: dynamic batching (``MicroBatcher``, which services may use directly), instances, memory."""

# The serving guide's path for a service's own batcher: ``from trtpipe.serve.batching import MicroBatcher``.
from trtpipe.serve.batching.batcher import BatchingOptions, MicroBatcher, QueueFull

__all__ = ["BatchingOptions", "MicroBatcher", "QueueFull"]
