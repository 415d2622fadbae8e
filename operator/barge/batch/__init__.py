"""barge.batch."""
