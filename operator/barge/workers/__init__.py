"""Queue workers: claim-check messages answered through a pool's synchronous path, within the pool's quota.

Complete on success or refusal (a refusal is an answer); dead-letter invalid requests at once; abandon only on
infrastructure failure, and dead-letter after `maxDeliveries`; a redelivered message whose result already
exists is completed without calling the model again.
"""
