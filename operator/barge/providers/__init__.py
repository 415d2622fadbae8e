"""barge.providers."""
