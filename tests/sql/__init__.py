"""The SQL layer and the dialects: pure, no database server."""
