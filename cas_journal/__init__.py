"""cas-journal."""
