"""The shell's one backoff rule (consumers/backoff.py) is a pure function of the attempt number."""

from consumers.backoff import compute_backoff_s


def test_backoff_doubles_from_the_base_after_each_failure() -> None:
    waits = [compute_backoff_s(n, base_s=0.5, max_s=100.0) for n in range(1, 5)]
    assert waits == [0.5, 1.0, 2.0, 4.0]


def test_backoff_never_exceeds_its_cap_even_after_a_long_outage() -> None:
    assert compute_backoff_s(6, base_s=0.5, max_s=10.0) == 10.0
    assert compute_backoff_s(10_000, base_s=0.5, max_s=10.0) == 10.0


def test_no_failure_yet_means_no_wait() -> None:
    assert compute_backoff_s(0, base_s=0.5, max_s=10.0) == 0.0


def test_matches_the_turn_retry_policy_tenacity_loop() -> None:
    from tenacity import RetryCallState

    from consumers.backoff import tenacity_wait

    wait = tenacity_wait(base_s=0.5, max_s=10.0)
    state = RetryCallState(None, None, (), {})
    state.attempt_number = 3
    assert wait(state) == 2.0
