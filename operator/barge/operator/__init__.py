"""barge.operator."""
