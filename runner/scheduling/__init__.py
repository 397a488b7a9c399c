"""What the scheduler composes to send a run's trials: the scheduler itself, each endpoint's
limits (gate, slots, adaptive concurrency and rate), its circuit breaker, the budget, the
adoption of announced limits, the recording of attempts, the verdict on a failed attempt, the
queue of trials, the event loop's lag and the stop of a run.

It may import the config (`ibias.runner.config`), the providers (their interface and retry
classification), the status file and `money` at `runner/`'s top level, and the store; nothing
of `execution/` (which composes it), the simulator or the CLI.
"""
