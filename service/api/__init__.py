"""HTTP layer: FastAPI routers, schemas, dependencies and problem+json errors."""
