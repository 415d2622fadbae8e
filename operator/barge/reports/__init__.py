"""Cost reports built from the ledger's spend rows (ledger/spend.py): FOCUS exports and the terminal summary.

`focus` and `summary` are pure builders (rows in, rows out); `export` reads the ledger and writes to storage.
"""
