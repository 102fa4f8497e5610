"""Laneway's SQL migrations, installed as the data package `laneway.migrations`.

The numbered .sql files here are the schema's history, applied in order by
laneway/store/migrate.py. pyproject.toml maps this folder into the package, so the wheel
carries these files inside `laneway/` and there is one copy of them in the repository.
"""
