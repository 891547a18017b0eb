"""Pure decision logic (ladder, strikes, budget, breaker).

No I/O here: import-linter enforces it."""
