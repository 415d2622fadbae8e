"""barge gateway: the OpenAI Files + Batches API in front of Barge, for applications that never touch kubectl.

A batch is an LLMBatchJob in the caller's namespace (built by `batches.build_job`), so admission, budgets,
metering and retention hold unchanged; the caller is a ServiceAccount token checked by the API server itself
(TokenReview, SubjectAccessReview: `auth.py`); files live in the tenant's storage prefix (`files.py`).
"""
