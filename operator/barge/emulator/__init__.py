"""barge.emulator."""
