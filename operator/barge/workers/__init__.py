"""barge.workers."""
