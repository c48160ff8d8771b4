"""The model registry: SQLAlchemy models, repository functions, blob store."""
