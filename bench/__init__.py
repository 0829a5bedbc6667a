"""`make bench`: turnstile measured side by side with a raw nats-py loop and LangGraph, in one run."""
