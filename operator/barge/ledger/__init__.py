"""barge.ledger."""
