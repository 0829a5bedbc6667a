"""SQL adapters (SQLAlchemy 2 async): SQLite by default, PostgreSQL through the same code."""
