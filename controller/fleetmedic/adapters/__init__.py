"""Thin adapters to the outside world (Kubernetes, ansible-runner, SMTP).

They map third-party errors into fleetmedic.errors."""
