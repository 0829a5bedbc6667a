"""turnstile's domain: session records and rules, the session lifecycle engine, and their ports."""
