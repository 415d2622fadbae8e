"""The cascade: one LLMBatchJob fed by another's results (`spec.input.fromJob`), as the upstream's batches land.

| module      | what it answers                                                                          |
| ----------- | ---------------------------------------------------------------------------------------- |
| `select`    | `fromJob.select` and `fromJob.fields` compiled once (CEL, cel-python), evaluated per line |
| `source`    | the upstream's final result lines so far: its ledger rows, then results.jsonl once ended |
| `feed`      | which result lines are new to the downstream, and what item each one becomes             |
| `runner`    | `CascadeRunner`: a JobRunner whose input grows each step and that ends only after it     |

Why a package of its own: a job's input was read once, whole, when it was planned; a downstream job's input
arrives while it runs. Everything about that lives here, and the engine's runner is reused unchanged.
"""
