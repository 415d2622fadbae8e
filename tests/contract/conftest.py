"""Contract tests: the providers' real SDKs against `barge.emulator` (fixtures live in tests/conftest.py)."""
