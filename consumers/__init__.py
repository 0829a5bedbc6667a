"""The service shell: NATS wiring, inbound loop, control API, per-session actors."""
