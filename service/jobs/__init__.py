"""Profile computation and caching (and, with Redis, the accounting worker)."""
