"""The remediation controller: watch, decide, act, record, escalate."""
