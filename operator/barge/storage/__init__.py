"""barge.storage."""
