"""A local LLM provider that speaks the Anthropic and OpenAI/Azure batch and sync APIs, with fault injection.

Why: Barge's correctness lives at the provider boundary (unordered results, four outcomes, expiry, cancel,
duplicate creates, quotas), which cannot be exercised against paid APIs on every commit. The emulator is
checked with the providers' real SDKs in tests/contract and is the default provider of the demo.
"""
