"""Admin dashboard pieces: server-rendered pages and SVG charts (no JavaScript needed)."""
